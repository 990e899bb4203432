"""A download that cannot reach the hub waits and tries again instead of failing at once
(an app resumed at launch before the network is up): against the fake hub stopped and
started again on its port, a real store and the real DownloadManager, with its waits made
short (or long, to see a cancel end one)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlparse

import pytest

from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.storage.store import Store
from tests.support.hub_repos import TINY_REPO, Hub, error_of, finished
from tests.support.polling import until

pytest_plugins = ["tests.integration.download_fixtures"]


async def left_halfway(hub: Hub, store: Store) -> tuple[dict[str, Any], int]:
    """A download stopped mid-transfer as at a kill: its task running, its partial file on
    disk. Returns the task and the bytes kept."""
    hub.server.bytes_per_s = 1024 * 1024
    first = DownloadManager(store.tasks, progress_every=0.1)
    await first.start()
    task = await pull(store.tasks, TINY_REPO, "Q4_K_M")

    async def halfway() -> bool:
        events = await store.tasks.events(task["id"])
        return any(e.get("bytes_done", 0) > 512 * 1024 for e in events)

    await until(halfway, 30, "half a megabyte")
    await first.stop()
    hub.server.bytes_per_s = None
    kept = next(hub.blob_dir(TINY_REPO).glob("*.incomplete")).stat().st_size
    return task, kept


async def waits(store: Store, task_id: str) -> list[dict[str, Any]]:
    """The task's events that say it waits to try again."""
    events = await store.tasks.events(task_id)
    return [e for e in events if e["type"] == "download.progress" and "retry_at" in e]


@pytest.fixture
async def later() -> AsyncIterator[list[DownloadManager]]:
    """Managers a test starts itself (after the hub went down); stopped at the end."""
    started: list[DownloadManager] = []
    yield started
    for manager in started:
        await manager.stop()


async def test_a_resumed_download_waits_for_the_hub_and_continues_from_its_bytes(
    hub: Hub, store: Store, later: list[DownloadManager]
) -> None:
    task, kept = await left_halfway(hub, store)
    port = urlparse(hub.server.url).port
    await hub.server.stop()  # the relaunch finds no network
    asked_before = len(hub.server.requests)
    manager = DownloadManager(
        store.tasks, progress_every=0.1, retry_first=0.05, retry_most=0.2, retry_for=120
    )
    later.append(manager)
    await manager.start()

    async def two_waits() -> list[dict[str, Any]]:
        found = await waits(store, task["id"])
        return found if len(found) >= 2 else []

    first, second = (await until(two_waits, 30, "the download to wait for the hub"))[:2]
    row = await store.tasks.get(task["id"])
    assert row["state"] == "running", error_of(row)  # not failed: waiting
    assert "cannot be reached (Connection refused)" in first["retry_reason"]
    assert first["bytes_done"] == kept  # the bytes on disk, as the window shows them
    assert second["retry_at"] > first["retry_at"]
    await hub.server.start(port or 0)  # the network is up
    row = await finished(store, task["id"])
    assert row["state"] == "completed", error_of(row)
    file_gets = [
        r for m, p, r in hub.server.requests[asked_before:] if m == "GET" and "/resolve/" in p
    ]
    assert file_gets == [f"bytes={kept}-"]  # continued from the kept bytes
    # Its progress never went back below the kept bytes (the Output cell would jump to 0).
    events = await store.tasks.events(task["id"])
    since = next(i for i, e in enumerate(events) if "retry_at" in e)
    after = [e["bytes_done"] for e in events[since:] if e["type"] == "download.progress"]
    assert min(after) == kept, after


async def test_a_hub_down_throughout_fails_saying_how_long_it_tried(
    hub: Hub, store: Store, later: list[DownloadManager]
) -> None:
    task, kept = await left_halfway(hub, store)
    await hub.server.stop()
    manager = DownloadManager(
        store.tasks, progress_every=0.1, retry_first=0.05, retry_most=0.2, retry_for=0.5
    )
    later.append(manager)
    await manager.start()
    row = await finished(store, task["id"])
    assert row["state"] == "failed"
    error = error_of(row)
    assert error["code"] == "hub_unreachable"
    # 0.05 + 0.1 + 0.2 s of waits fit in the 0.5 s allowed, a fourth 0.2 s does not.
    assert "Tried 4 times over" in error["message"], error
    assert "pulling again continues from them" in error["message"]
    assert len(await waits(store, task["id"])) == 3
    partial = next(hub.blob_dir(TINY_REPO).glob("*.incomplete"))
    assert partial.stat().st_size == kept  # kept for the next pull


async def test_a_cancel_ends_the_wait_at_once(
    hub: Hub, store: Store, later: list[DownloadManager]
) -> None:
    task, _kept = await left_halfway(hub, store)
    await hub.server.stop()
    # A wait of ten minutes: only the cancel can end it within the test's bound.
    manager = DownloadManager(store.tasks, progress_every=0.1, retry_first=600, retry_most=600)
    later.append(manager)
    await manager.start()
    await until(lambda: waits(store, task["id"]), 30, "the download to wait for the hub")
    await store.tasks.cancel(task["id"])
    row = await finished(store, task["id"], 20)
    assert row["state"] == "cancelled"
    assert hub.leftovers(TINY_REPO) == []  # its partial file deleted, as any cancel does


def test_only_a_hub_that_cannot_be_reached_is_waited_for() -> None:
    """A 404, a gated repo or a full disk fail at once: waiting changes none of them."""
    import urllib.error

    from lmsp_desktop.core.downloads.hub import transient
    from lmsp_desktop.core.errors import LmspError

    def failure(code: str, cause: BaseException | None) -> LmspError:
        try:
            raise LmspError("x", code=code) from cause
        except LmspError as exc:
            return exc

    def answered(status: int) -> urllib.error.HTTPError:
        return urllib.error.HTTPError("http://hub/x", status, "x", {}, None)  # type: ignore[arg-type]

    assert transient(failure("hub_unreachable", ConnectionRefusedError(111, "refused")))
    assert transient(failure("hub_error", answered(503)))
    assert transient(failure("hub_error", answered(429)))
    assert transient(failure("download_interrupted", None))
    assert not transient(failure("hub_error", answered(404)))
    assert not transient(failure("hub_error", answered(403)))
    assert not transient(failure("repo_gated", None))
    assert not transient(failure("disk_full", None))
