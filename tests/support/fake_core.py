"""A real Core (real SQLite file, real aiohttp server on port 0) with the scripted FakeEngine,
on the test's own event loop: for proofs that need many fast generations."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.clients import create_client
from tests.support.lifecycle import started

MODEL = "smollm2-135m-instruct"


@contextlib.asynccontextmanager
async def running_core(data_dir: Path, engine: FakeEngine | None = None) -> AsyncIterator[Core]:
    async with started(
        Core(data_dir, port=0, engine=engine or FakeEngine(token_delay=0.002))
    ) as core:
        yield core


async def token(core: Core, *scopes: str, name: str = "reliability") -> str:
    _, secret = await create_client(core.store.db, name, frozenset(scopes or ("admin",)))
    return secret


def session(core: Core, secret: str, **kwargs: Any) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        base_url=core.url,
        headers={"Authorization": f"Bearer {secret}"},
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=120),
        **kwargs,
    )
