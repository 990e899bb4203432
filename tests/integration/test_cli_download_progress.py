"""A download's progress outside the window (the eighteenth walk): the task object's
`download_progress` (GET /v1/tasks/{id}, GET /v1/tasks) and `lmsp-desktop tasks` in the
TOKENS column say its bytes as the window does: "1.2 MiB / 3.0 MiB" while it runs, "…,
waiting for the hub until HH:MM:SS" while the hub is down, "3.0 MiB" once done. A real
service (Core with its DownloadManager) fetching from the fake hub on loopback, stopped and
started again on its port; the real CLI beside it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from lmsp_desktop.core.views import binary_size, time_of_day
from tests.integration.serve_process import call
from tests.integration.service_fixtures import LiveCore, cli_beside, task_object_of
from tests.support.hub_repos import TINY_REPO, TINY_SIZE, Hub
from tests.support.polling import until

pytest_plugins = ["tests.integration.download_fixtures"]
pytestmark = pytest.mark.slow

TOTAL = binary_size(TINY_SIZE)  # "3.0 MiB"


def tokens_cell(live: LiveCore, task_id: str) -> str:
    """What `lmsp-desktop tasks` shows for the task between its STATE and its AGE."""
    shown = cli_beside(live, "tasks")
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith(task_id))
    # ID  MODEL  KIND  STATE  QUEUE  TOKENS  AGE: the cells are apart by two spaces or more.
    cells = [cell.strip() for cell in line.split("  ") if cell.strip()]
    assert cells[2] == "download", cells
    return cells[5]


def said(progress: dict[str, Any]) -> str:
    """The cell a running download's progress should read."""
    text = f"{binary_size(progress['bytes_done'] or 0)} / {TOTAL}"
    if "retry_at" in progress:
        text += f", waiting for the hub until {time_of_day(progress['retry_at'])}"
    return text


async def test_tasks_and_the_task_object_say_a_downloads_bytes_and_its_wait_for_the_hub(
    hub: Hub, tmp_path: Path
) -> None:
    live = await asyncio.to_thread(LiveCore, tmp_path / "data")
    try:
        admin = await asyncio.to_thread(live.token, "admin")
        hub.server.bytes_per_s = 256 * 1024  # ~12 s for its 3 MiB: seen while it runs
        pull = {"repo": TINY_REPO, "quant": "Q4_K_M"}
        status, task = await asyncio.to_thread(
            call, f"{live.url}/v1/models/pull", admin, "POST", pull
        )
        assert status == 202, task
        task_id = task["id"]
        assert task["download_progress"]["bytes_total"] == TINY_SIZE

        def now() -> dict[str, Any]:
            return task_object_of(live, admin, task_id)

        async def under_way() -> dict[str, Any] | None:
            current = await asyncio.to_thread(now)
            progress = current["download_progress"]
            return current if (progress["bytes_done"] or 0) > 256 * 1024 else None

        running = await until(under_way, 60, "a quarter of a MiB fetched")
        assert running["state"] == "running"
        progress = running["download_progress"]
        assert progress["bytes_total"] == TINY_SIZE and progress["file"] == "tiny-Q4_K_M.gguf"
        assert "retry_at" not in progress
        before = await asyncio.to_thread(now)
        cell = await asyncio.to_thread(tokens_cell, live, task_id)
        after = await asyncio.to_thread(now)
        # Its bytes as the window says them (never "0"), read between two task objects.
        assert cell in (said(before["download_progress"]), said(after["download_progress"])), cell
        assert cell.endswith(f" / {TOTAL}") and "waiting" not in cell
        listed = await asyncio.to_thread(call, f"{live.url}/v1/tasks?limit=5", admin)
        mine = next(t for t in listed[1]["data"] if t["id"] == task_id)
        assert mine["download_progress"]["bytes_total"] == TINY_SIZE  # the list has it too

        port = urlparse(hub.server.url).port
        await hub.server.stop()  # the hub goes away mid-download

        async def waiting() -> dict[str, Any] | None:
            current = await asyncio.to_thread(now)
            return current if "retry_at" in current["download_progress"] else None

        waits = await until(waiting, 60, "the download to wait for the hub")
        assert waits["state"] == "running"
        assert waits["download_progress"]["retry_reason"]  # why it waits
        before = await asyncio.to_thread(now)
        cell = await asyncio.to_thread(tokens_cell, live, task_id)
        after = await asyncio.to_thread(now)
        assert cell in (said(before["download_progress"]), said(after["download_progress"])), cell
        assert ", waiting for the hub until " in cell

        hub.server.bytes_per_s = None
        await hub.server.start(port or 0)  # the hub is back: it goes on and ends

        async def ended() -> dict[str, Any] | None:
            current = await asyncio.to_thread(now)
            return current if current["state"] in ("completed", "failed") else None

        done = await until(ended, 90, "the download to end")
        assert done["state"] == "completed", done["error"]
        assert done["download_progress"] == {
            "bytes_done": TINY_SIZE,
            "bytes_total": TINY_SIZE,
            "bytes_per_s": None,
            "file": None,
        }
        assert await asyncio.to_thread(tokens_cell, live, task_id) == TOTAL  # not "0"
    finally:
        await asyncio.to_thread(live.stop)
