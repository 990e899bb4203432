"""A download completes once the registry has taken its files (on_complete), not before:
`models pull` and the window read a completed download's model from the service, and it
was not listed yet (or listed with the state of the file before). Real store and manager,
fake hub."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.storage.store import Store
from tests.support.hub_repos import TINY_REPO, Hub, finished
from tests.support.polling import until

pytest_plugins = ["tests.integration.download_fixtures"]


async def test_the_task_completes_after_its_files_are_taken(hub: Hub, store: Store) -> None:
    taken: list[Path] = []
    release = asyncio.Event()

    async def on_complete(paths: list[Path]) -> None:
        taken.extend(paths)
        await release.wait()  # the registry's scan, as long as it takes

    manager = DownloadManager(store.tasks, progress_every=0.1, on_complete=on_complete)
    await manager.start()
    try:
        task = await pull(store.tasks, TINY_REPO, "Q8_0")
        await until(lambda: taken, 30, "the files handed to the registry")
        assert (await store.tasks.get(task["id"]))["state"] == "running"
        release.set()
        row = await finished(store, task["id"])
        assert row["state"] == "completed"
        assert [p.name for p in taken] == ["tiny-Q8_0.gguf"]
    finally:
        release.set()
        await manager.stop()


async def test_a_failure_to_take_the_files_still_completes_the_download(
    hub: Hub, store: Store
) -> None:
    async def on_complete(paths: list[Path]) -> None:
        raise OSError("the registry could not read them")

    manager = DownloadManager(store.tasks, progress_every=0.1, on_complete=on_complete)
    await manager.start()
    try:
        task = await pull(store.tasks, TINY_REPO, "Q8_0")
        row = await finished(store, task["id"])
        assert row["state"] == "completed"  # fetched and checked: its part is done
    finally:
        await manager.stop()
