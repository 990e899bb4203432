"""A download that failed part way says how far it got, as a cancelled one does: the task
object's `download_progress.bytes_done` (GET /v1/tasks/{id}, GET /v1/tasks) and `lmsp-desktop
tasks` ("failed at 1.2 MiB of 3.0 MiB"). It had null and "-": only its events knew. A real
service (Core with its DownloadManager) fetching from the fake hub on loopback, which goes
away mid-download; the real CLI beside it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.views import binary_size
from tests.integration.serve_process import call
from tests.integration.service_fixtures import LiveCore, cli_beside, task_object_of
from tests.support.hub_repos import TINY_REPO, TINY_SIZE, Hub
from tests.support.polling import until

pytest_plugins = ["tests.integration.download_fixtures"]
pytestmark = pytest.mark.slow


def tokens_cell(live: LiveCore, task_id: str) -> str:
    """What `lmsp-desktop tasks` shows for the task between its QUEUE and its AGE."""
    shown = cli_beside(live, "tasks")
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith(task_id))
    # ID  MODEL  KIND  STATE  QUEUE  TOKENS  AGE: the cells are apart by two spaces or more.
    cells = [cell.strip() for cell in line.split("  ") if cell.strip()]
    assert cells[2:4] == ["download", "failed"], cells
    return cells[5]


async def test_a_failed_download_says_how_far_it_got(hub: Hub, tmp_path: Path) -> None:
    live = await asyncio.to_thread(LiveCore, tmp_path / "data")
    try:
        admin = await asyncio.to_thread(live.token, "admin")
        live.core.downloads.retry_for = 0  # the hub gone: fail at once, no waiting for it
        hub.server.bytes_per_s = 256 * 1024  # ~12 s for its 3 MiB: stopped part way
        pull = {"repo": TINY_REPO, "quant": "Q4_K_M"}
        status, task = await asyncio.to_thread(
            call, f"{live.url}/v1/models/pull", admin, "POST", pull
        )
        assert status == 202, task
        task_id = task["id"]

        def now() -> dict[str, Any]:
            return task_object_of(live, admin, task_id)

        async def under_way() -> bool:
            progress = (await asyncio.to_thread(now))["download_progress"]
            return (progress["bytes_done"] or 0) > 256 * 1024

        await until(under_way, 60, "a quarter of a MiB fetched")
        await hub.server.stop()  # the hub goes away mid-download

        async def ended() -> dict[str, Any] | None:
            current = await asyncio.to_thread(now)
            return current if current["state"] not in ("queued", "running") else None

        failed = await until(ended, 60, "the download to fail")
        assert failed["state"] == "failed", failed
        done = failed["download_progress"]["bytes_done"]
        assert isinstance(done, int) and 256 * 1024 < done < TINY_SIZE, failed
        assert failed["download_progress"]["bytes_total"] == TINY_SIZE
        # The events' last count, as a cancelled download's: what the window and `tasks` say.
        status, page = await asyncio.to_thread(
            call, f"{live.url}/v1/tasks/{task_id}/events?limit=1000", admin
        )
        counted = [e["bytes_done"] for e in page["data"] if e["type"] == "download.progress"]
        assert done == counted[-1]
        status, listed = await asyncio.to_thread(call, f"{live.url}/v1/tasks?limit=5", admin)
        [mine] = [t for t in listed["data"] if t["id"] == task_id]
        assert mine["download_progress"]["bytes_done"] == done  # the list has it too

        cell = await asyncio.to_thread(tokens_cell, live, task_id)
        assert cell == f"failed at {binary_size(done)} of {binary_size(TINY_SIZE)}", cell
    finally:
        await asyncio.to_thread(live.stop)
