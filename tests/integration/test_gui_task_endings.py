"""What the window says about tasks that ended (the sixteenth walk): why an `incomplete` one
stopped, how long a task ended by a restart ran, and counts that move with the row on a
cancel. A real core (store, runner, HTTP service, recovery) under the real MainWindow; a
scripted engine where a task must stop at a known token."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask
from lmsp_desktop.gui.main_window import MainWindow
from lmsp_desktop.gui.models.task_table import COL_DURATION, COL_STATE
from tests.integration.gui_windows import (
    MODEL,
    client_token,
    open_app,
    post_background,
    slow_engine,
)
from tests.support.polling import until
from tests.unit.core.test_models_gguf_meta import write_gguf

pytestmark = pytest.mark.gui


def cell(window: MainWindow, task_id: str, col: int, role: int = 0) -> Any:
    rows = window.tasks.model
    row = rows.row_of(task_id)
    return None if row is None else rows.index(row, col).data(role)


def recent_tip(window: MainWindow, task_id: str) -> str:
    """The tooltip of the sidebar's Recent entry of a task ("" while not listed)."""
    recent = window.sidebar.recent
    for i in range(recent.count()):
        if recent.item(i).data(Qt.ItemDataRole.UserRole + 1) == task_id:
            return recent.item(i).toolTip()
    return ""


def last_event(window: MainWindow) -> str:
    events = window.tasks.details.events
    rows = events.rowCount()
    return str(events.index(rows - 1, 3).data()) if rows else ""


async def test_an_incomplete_task_says_it_stopped_at_the_limit_or_a_full_context(
    qtbot: Any, tmp_path: Path
) -> None:
    """The row's State tooltip, the details header and the last event say why, in words: the
    request's 5-token limit, or the model's context filled up (the store says
    max_output_tokens for both)."""
    engine = FakeEngine([f" w{i}" for i in range(400)], context_length=40)
    async with open_app(qtbot, tmp_path, engine=engine) as (core, window):
        token = await client_token(core)
        limited = await post_background(core, token, max_output_tokens=5)
        filled = await post_background(core, token)  # runs into the 40-token context
        tip = Qt.ItemDataRole.ToolTipRole
        details = window.tasks.details
        for task_id in (limited, filled):
            await until(
                lambda t=task_id: cell(window, t, COL_STATE) == "incomplete",
                what=f"{task_id} incomplete",
            )
        assert (await core.task(filled))["output_tokens"] < 40  # the context, not a limit
        expected = {
            limited: "stopped at the 5-token limit",
            filled: "the context is full",
        }
        for task_id, words in expected.items():
            state_tip = cell(window, task_id, COL_STATE, tip)
            assert state_tip and words in state_tip and '"length"' in state_tip, state_tip
            # The sidebar's Recent entry too ("incomplete 0s ago" has no room for more).
            said = rf"incomplete \d+[smhd] ago — {re.escape(words)}\."
            await until(
                lambda t=task_id, r=said: re.search(r, recent_tip(window, t)),
                what=lambda t=task_id: f"Recent: {recent_tip(window, t)}",
            )
            window.tasks.table.selectRow(window.tasks.model.row_of(task_id))
            await until(
                lambda w=words: f"incomplete — {w}" in details.header.toolTip(),
                what=lambda: f"the header: {details.header.toolTip()}",
            )
            await until(
                lambda w=words: (
                    "response.incomplete"
                    in str(details.events.index(details.events.rowCount() - 1, 2).data())
                    and w in last_event(window)
                ),
                what=lambda: f"the incomplete event's summary: {last_event(window)}",
            )


async def leave_killed_runs(data_dir: Path) -> tuple[str, str]:
    """What a run killed 100 s ago leaves: a task that wrote its last text 2 s after its
    start, and one that started and wrote nothing; both fail at the restart."""
    store = Store(data_dir)
    await store.open()
    made = []
    try:
        for text in ("The sky is", None):
            body = {"model": MODEL, "input": "Name a colour.", "background": True}
            request = parse_create(body, "fail")
            created = await store.tasks.create(
                NewTask(model=MODEL, request=request, on_restart=RestartPolicy.FAIL)
            )
            await store.tasks.mark_running(created.task_id)
            if text:
                await store.tasks.append_deltas(
                    created.task_id, [text], output_tokens=3, input_tokens=9, snapshot=None
                )
            made.append(created.task_id)
    finally:
        await store.close()
    # Their times moved back as if the run was killed 100 s before this restart: started at
    # T, the first one's text at T + 2 s.
    start = time.time() - 100
    with sqlite3.connect(data_dir / "lmsp.db") as db:
        for task_id in made:
            db.execute(
                "UPDATE tasks SET created_at=?, started_at=? WHERE id=?", (start, start, task_id)
            )
            db.execute("UPDATE task_events SET created_at=? WHERE task_id=?", (start, task_id))
        db.execute(
            "UPDATE task_events SET created_at=? WHERE task_id=? AND type=?",
            (start + 2, made[0], "response.output_text.delta"),
        )
    return made[0], made[1]


async def test_a_task_ended_by_the_restart_shows_how_long_it_ran_never_the_downtime(
    qtbot: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    wrote, silent = await leave_killed_runs(data_dir)
    async with open_app(qtbot, data_dir, engine=FakeEngine()) as (core, window):
        assert (await core.task(wrote))["state"] == "failed"
        await until(lambda: cell(window, wrote, COL_DURATION) is not None, what="the rows")
        tip = Qt.ItemDataRole.ToolTipRole
        # Until its last event (2 s), not the 100 s to the restart.
        assert cell(window, wrote, COL_DURATION) == "2.0 s"
        assert "Ended by the restart" in cell(window, wrote, COL_DURATION, tip)
        assert cell(window, silent, COL_DURATION) == "—"
        assert "Ended by the restart" in cell(window, silent, COL_DURATION, tip)
        details = window.tasks.details
        window.tasks.table.selectRow(window.tasks.model.row_of(wrote))
        await until(lambda: "ran 2.0 s" in details.header.toolTip(), what=details.header.toolTip)
        window.tasks.table.selectRow(window.tasks.model.row_of(silent))
        await until(
            lambda: "ended by the restart" in details.header.toolTip(),
            what=details.header.toolTip,
        )
        assert "ran " not in details.header.toolTip()


async def test_the_counts_say_cancelled_as_soon_as_the_row_does(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        task_id = await post_background(core, await client_token(core))
        await until(lambda: cell(window, task_id, COL_STATE) == "running", what="it runs")
        await until(lambda: "1 running" in window.status.counts_label.text(), what="counted")
        await window.tasks.cancel_tasks([task_id])
        seen: list[tuple[str, str, str]] = []

        def row_cancelled() -> bool:
            # What a user sees at once: the row, the sidebar and the status bar together.
            state = str(cell(window, task_id, COL_STATE))
            seen.append((state, window.sidebar.counts.text(), window.status.counts_label.text()))
            return state == "cancelled"

        await until(row_cancelled, interval=0.005, what=lambda: seen[-1])
        _, sidebar, status = seen[-1]
        assert "1 cancelled" in sidebar and "running" not in sidebar, seen[-3:]
        assert "cancelling" not in sidebar, seen[-3:]
        assert status == "1 cancelled", seen[-3:]


async def test_the_service_json_a_start_writes_is_its_owners_only(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, _window):
        announced = tmp_path / "service.json"
        assert core.url in announced.read_text()
        assert announced.stat().st_mode & 0o777 == 0o600, oct(announced.stat().st_mode)


async def test_a_rescan_says_so_when_nothing_changed(qtbot: Any, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    write_gguf(folder / "tiny.gguf", context_length=2048)
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (_core, window):
        page = window.models
        window.nav.setCurrentRow(1)
        await until(lambda: page.model.rowCount() == 1, what="the model listed")
        page.rescan_button.click()
        await until(
            lambda: page.status.text() == "Rescanned: nothing changed.", what=page.status.text
        )
        write_gguf(folder / "second.gguf", context_length=2048)
        page.rescan_button.click()
        await until(lambda: page.model.rowCount() == 2, what="the new file listed")
        await until(
            lambda: page.status.text() == "Rescanned: the list shows what changed.",
            what=page.status.text,
        )
