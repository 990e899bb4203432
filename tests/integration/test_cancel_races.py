"""Cancel against completion, 2,000 times through the real store and 150 times through a real
service (HTTP and the GUI's Core.cancel): never both cancelled and completed, the final state
always the one the last event implies, and each caller told the truth."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.clients import create_client
from lmsp_desktop.core.storage.store import Store
from tests.support.lifecycle import started
from tests.support.races import http_races, store_races

# Enough that both sides win many times: the store's offsets (0-30 loop ticks each side, with
# or without deltas, 25 races interleaved) repeat every combination dozens of times in
# 2,000 races; the service's cancel delay follows the machine's pace and settles where both
# sides win within a few dozen races. (It was 10,000 and 600: five times the time for the same
# combinations; volume belongs in `bench`.)
STORE_RACES = 2_000
HTTP_RACES = 150


async def test_store_races_never_cancel_and_complete(data_dir: Path) -> None:
    store = Store(data_dir, synchronous="NORMAL")  # the race is about order, not fsync
    await store.open()
    try:
        figures = await store_races(store, STORE_RACES, seed=11)
    finally:
        await store.close()
    print(figures.summary("store"))
    assert figures.violations == [], figures.violations[:20]
    assert figures.races == STORE_RACES
    # Both sides won often: the offsets really straddle the moment of completion.
    assert figures.outcomes["completed"] > STORE_RACES // 10, figures.outcomes
    assert figures.outcomes["cancelled"] > STORE_RACES // 10, figures.outcomes
    # ... whichever way the finish went: with the last deltas or as a move of its own.
    for state in ("completed", "cancelled"):
        for way in ("with the last deltas", "alone"):
            assert figures.outcomes[f"{state} ({way})"] > STORE_RACES // 40, figures.outcomes


@pytest.fixture
async def fake_core(tmp_path: Path) -> AsyncIterator[Core]:
    # Eight tokens, 2 ms each: completions land within a few tens of milliseconds.
    async with started(
        Core(tmp_path / "data", port=0, engine=FakeEngine(token_delay=0.002))
    ) as core:
        yield core


async def test_http_and_gui_cancels_around_completion(fake_core: Core) -> None:
    _, token = await create_client(fake_core.store.db, "racer", frozenset({"admin"}))
    async with aiohttp.ClientSession(base_url=fake_core.url) as http:
        figures = await http_races(
            http, {"Authorization": f"Bearer {token}"}, fake_core.cancel, HTTP_RACES, seed=7
        )
    print(figures.summary("http"))
    assert figures.violations == [], figures.violations[:20]
    assert figures.races == HTTP_RACES
    assert figures.outcomes["completed"] > HTTP_RACES // 20, figures.outcomes
    assert figures.outcomes["cancelled"] > HTTP_RACES // 20, figures.outcomes
