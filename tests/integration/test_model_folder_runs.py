"""A folder given for one run (`--models-dir`) is that run's: the next runs without it do not
list its models as missing (a GUI walk: three rows "✗ file missing" for files on disk, the
sidebar counting them), and a run with it again lists them verified. A real Core on a real
data folder, started three times, read over its real HTTP API."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from tests.integration.gui_windows import client_token
from tests.support.lifecycle import started
from tests.support.model_stores import demo, place


async def listed(core: Core) -> dict[str, str]:
    """`GET /v1/models` as a client reads it: id → state."""
    token = await client_token(core)
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession(core.url) as http,
        http.get("/v1/models", headers=headers) as answer,
    ):
        body = await answer.json()
        assert answer.status == 200, body
    return {m["id"]: m["state"] for m in body["data"] if m["owned_by"] == "local"}


async def test_a_one_run_models_dir_is_not_missing_in_later_runs(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    folder = tmp_path / "one-run"
    place(demo(), folder / "smol.gguf")

    def core(*dirs: Path) -> Core:
        return Core(data_dir, port=0, engine=FakeEngine(), include_demo=False, model_dirs=[*dirs])

    async with started(core(folder)) as first:
        await first.scan_models()
        assert await listed(first) == {"smol": "unloaded"}  # verified, not loaded
    async with started(core()) as later:
        await later.scan_models()
        assert await listed(later) == {}  # not "missing": its folder is not looked in
        assert [m.id for m in await later.models()] == []  # nor on the Models page
    async with started(core(folder)) as again:
        await again.scan_models()
        assert await listed(again) == {"smol": "unloaded"}
        assert again.registry.bytes_hashed == 0  # known unchanged: not read again
        (folder / "smol.gguf").unlink()  # gone from a folder looked in: missing
        await again.scan_models()
        assert await listed(again) == {"smol": "missing"}
