"""A download waiting for the hub says what the service does ("retrying at 18:58:53"), not
the advice of a failure ("…and try again"): the service tries again by itself. The fake hub
stopped, a real store and the real DownloadManager."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.views import time_of_day
from tests.support.hub_repos import TINY_REPO, Hub
from tests.support.polling import until

pytest_plugins = ["tests.integration.download_fixtures"]


@pytest.fixture
async def later() -> AsyncIterator[list[DownloadManager]]:
    started: list[DownloadManager] = []
    yield started
    for manager in started:
        await manager.stop()


async def test_a_wait_for_the_hub_says_when_it_retries(
    hub: Hub, store: Store, later: list[DownloadManager]
) -> None:
    task = await pull(store.tasks, TINY_REPO, "Q4_K_M")
    await hub.server.stop()  # listed, then the network went away
    manager = DownloadManager(store.tasks, progress_every=0.1, retry_first=30, retry_for=600)
    later.append(manager)
    await manager.start()

    async def waiting() -> dict[str, Any] | None:
        events = await store.tasks.events(task["id"])
        return next((e for e in events if "retry_at" in e), None)

    wait = await until(waiting, 30, "the download to wait for the hub")
    reason = wait["retry_reason"]
    assert "cannot be reached (Connection refused)." in reason  # what happened
    assert reason.endswith(f"Retrying at {time_of_day(wait['retry_at'])}.")  # what it does
    assert "try again" not in reason and "pull again" not in reason, reason
    row = await store.tasks.get(task["id"])
    assert row["state"] == "running"  # waiting, not failed
