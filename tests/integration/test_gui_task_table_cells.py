"""The Tasks table's cells agree with the task's details header (the nineteenth walk): an
ended task shows no restart policy ("—": a restart does nothing to it), a download resumed
after a quit counts its Duration from its first start (it said the 5.8 s since the resume),
and a download waiting for the hub says its reason once ("Retrying at 18:58:57." is in it;
"It tries again by itself" repeated it). Real MainWindow over a real core, a real (fake) hub
on loopback, a real quit and relaunch on the same data, at the default window size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.format import clock, human_duration
from lmsp_desktop.gui.models.task_table import COL_DURATION, COL_ON_RESTART, COL_STATE, COL_TOKENS
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import TINY_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


def cell(window: Any, task_id: str, col: int, role: int = Qt.ItemDataRole.DisplayRole) -> str:
    model = window.tasks.model
    row = model.row_of(task_id)
    return "" if row is None else str(model.index(row, col).data(role))


def tip(window: Any, task_id: str, col: int) -> str:
    return cell(window, task_id, col, Qt.ItemDataRole.ToolTipRole)


async def some_bytes(core: Any, task_id: str) -> bool:
    rows = await core.task_event_rows(task_id, 0, 100)
    return any(r["type"] == "download.progress" for r in rows)


@pytest.mark.qt_log_ignore("does not support raise", "does not support grabbing")
async def test_a_download_resumed_after_a_quit_counts_its_duration_from_its_first_start(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    data = tmp_path / "data"
    hub.server.bytes_per_s = 256 * 1024  # ~12 s for its 3 MiB: still running at the quit
    async with open_app(qtbot, data, engine=FakeEngine()) as (core, window):
        task_id = await core.pull_model(TINY_REPO, "tiny-Q8_0.gguf")
        await until(lambda: some_bytes(core, task_id), 30, "its first bytes")
        # Running: its policy is what a restart would do to it.
        await until(
            lambda: cell(window, task_id, COL_ON_RESTART) == "resume",
            what=lambda: cell(window, task_id, COL_ON_RESTART),
        )
    # Quit with the download unfinished (policy resume), then launched again.
    hub.server.bytes_per_s = None
    async with open_app(qtbot, data, engine=FakeEngine()) as (core, window):
        if window.dialog is not None:
            window.dialog.reject()  # the recovery report: "1 resumed"
        window.resize(1200, 780)  # the first launch's size (main_window.FIRST_SIZE)
        tasks, details = window.tasks, window.tasks.details
        await until(
            lambda: cell(window, task_id, COL_STATE) == "completed",
            30,
            what=lambda: cell(window, task_id, COL_STATE),
        )
        row = await core.task(task_id)
        assert row["restarts"] == 1
        events = await core.task_event_rows(task_id, 0, 1000)
        began = next(e["created_at"] for e in events if e["type"] == "response.in_progress")
        assert began < row["started_at"]  # its last run started at the resume
        ran = human_duration(row["finished_at"] - began)
        # From its first start to its end, as the details header says it.
        await until(
            lambda: cell(window, task_id, COL_DURATION) == ran,
            what=lambda: (ran, cell(window, task_id, COL_DURATION)),
        )
        duration_tip = tip(window, task_id, COL_DURATION)
        assert f"From its first start at {clock(began)}" in duration_tip, duration_tip
        assert "once" in duration_tip, duration_tip
        # Ended: a restart does nothing to it, so no policy in the table either.
        assert cell(window, task_id, COL_ON_RESTART) == "—"
        assert "Ended" in tip(window, task_id, COL_ON_RESTART)
        tasks.show_task(task_id)
        await until(
            lambda: f"ran {ran} from {clock(began)}" in details.header.toolTip(),
            what=details.header.toolTip,
        )
        assert "on restart" not in details.header.toolTip()
        await until(lambda: not tasks.fitter._timer.isActive())
        window.grab().save(str(tmp_path / "table-resumed-1200.png"))


@pytest.mark.qt_log_ignore("does not support raise", "does not support grabbing")
async def test_a_download_waiting_for_the_hub_says_its_reason_once(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        window.resize(1200, 780)
        hub.server.bytes_per_s = 256 * 1024
        task_id = await core.pull_model(TINY_REPO, "tiny-Q8_0.gguf")
        await until(lambda: some_bytes(core, task_id), 30, "its first bytes")
        await hub.server.stop()  # the hub goes away: the download waits to try again
        await until(
            lambda: "waiting for the hub until" in cell(window, task_id, COL_TOKENS),
            30,
            what=lambda: cell(window, task_id, COL_TOKENS),
        )
        reason = (await core.tasks_by_id([task_id]))[0].progress["retry_reason"]
        assert "Retrying at " in reason  # the reason says when it tries again
        shown = tip(window, task_id, COL_TOKENS)
        assert shown == f"{reason} Cancel stops it.", shown
        assert "tries again by itself" not in shown
        assert cell(window, task_id, COL_ON_RESTART) == "resume"  # not ended: its policy
        await until(lambda: not window.tasks.fitter._timer.isActive())
        window.grab().save(str(tmp_path / "table-waiting-1200.png"))
        await core.cancel(task_id)
        await until(
            lambda: cell(window, task_id, COL_ON_RESTART) == "—",
            what=lambda: cell(window, task_id, COL_ON_RESTART),
        )
        assert cell(window, task_id, COL_DURATION) != "—"
