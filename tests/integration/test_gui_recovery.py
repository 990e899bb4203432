"""Leftover tasks in every unfinished state → the app's real startup → the recovery dialog."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QApplication

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask
from lmsp_desktop.gui import launch
from lmsp_desktop.gui.dialogs.recovery_dialog import TASK_ID, RecoveryDialog
from lmsp_desktop.gui.main_window import MainWindow
from lmsp_desktop.gui.models.task_table import COL_STATE, COL_TPS
from tests.integration.gui_windows import launch_args, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui

MODEL = "smollm2-135m-instruct"
# Table 11.3: (state before, policy) → (state after, event written).
EXPECTED = {
    ("queued", "fail"): ("failed", "response.failed"),
    ("queued", "retry"): ("queued", "response.queued"),
    ("queued", "resume"): ("queued", "response.queued"),
    ("loading", "fail"): ("failed", "response.failed"),
    ("loading", "retry"): ("queued", "response.queued"),
    ("loading", "resume"): ("queued", "response.queued"),
    ("running", "fail"): ("failed", "response.failed"),
    ("running", "retry"): ("queued", "response.queued"),
    ("running", "resume"): ("running", "response.resumed"),
    ("cancelling", "fail"): ("cancelled", "response.cancelled"),
    ("cancelling", "retry"): ("cancelled", "response.cancelled"),
    ("cancelling", "resume"): ("cancelled", "response.cancelled"),
}

# What the "What happened" column says instead of the event's name and number.
SENTENCE = {
    ("queued", "failed"): "Failed: the service restarted",
    ("loading", "failed"): "Failed: the service restarted",
    ("running", "failed"): "Failed: the service restarted",
    ("queued", "queued"): "Still waiting in the queue",
    ("loading", "queued"): "Will start again from the beginning",
    ("running", "queued"): "Will start again from the beginning",
    ("running", "running"): "Resumed after 3 tokens",
    ("cancelling", "cancelled"): "Cancelled, as was asked before the restart",
}


async def leave_leftovers(data_dir: Path) -> dict[str, tuple[str, str]]:
    """What a killed previous run leaves: one task per (state, policy) pair of table 11.3."""
    store = Store(data_dir)
    await store.open()
    made: dict[str, tuple[str, str]] = {}
    try:
        for state, policy in EXPECTED:
            body = {
                "model": MODEL,
                "input": "Name a colour.",
                "background": True,
                "max_output_tokens": 6,
                "temperature": 0,
                "on_restart": policy,
            }
            request = parse_create(body, "fail")
            created = await store.tasks.create(
                NewTask(model=MODEL, request=request, on_restart=RestartPolicy(policy))
            )
            task_id = created.task_id
            if state == "loading":
                await store.tasks.mark_loading(task_id)
            if state in ("running", "cancelling"):
                await store.tasks.mark_running(task_id)
                # As the runner writes them: the snapshot holds the token ids generated so
                # far (the demo model's "The sky is"), which a resume continues after.
                await store.tasks.append_deltas(
                    task_id,
                    ["The sky is"],
                    output_tokens=3,
                    input_tokens=9,
                    snapshot={"tokens": [504, 6376, 314], "seed": 7},
                )
            if state == "cancelling":
                await store.tasks.cancel(task_id)
            assert (await store.tasks.get(task_id))["state"] == state
            made[task_id] = (state, policy)
    finally:
        await store.close()
    return made


def the_window(data_dir: Path) -> MainWindow | None:
    for widget in QApplication.topLevelWidgets():
        if isinstance(widget, MainWindow) and Path(widget.core.data_dir) == data_dir:
            return widget
    return None


async def test_startup_recovers_every_leftover_and_the_dialog_lists_each_outcome(
    qtbot: Any, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    leftovers = await leave_leftovers(data_dir)
    args = launch_args(data_dir)
    settings = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    app = asyncio.ensure_future(launch.main(args, settings))
    window: MainWindow | None = None
    try:
        await until(lambda: the_window(data_dir) is not None, what="the main window")
        window = the_window(data_dir)
        assert window is not None
        await until(
            lambda: isinstance(window.dialog, RecoveryDialog) and window.dialog.isVisible(),
            what="the recovery dialog",
        )
        # The service already answers (and announced itself) while the dialog is open.
        assert (data_dir / "service.json").is_file()
        assert window.core.url.startswith("http://127.0.0.1:")

        dialog = window.dialog
        title = dialog.findChildren(type(dialog.summary))[0].text()
        assert "Recovered 12 tasks after an unclean shutdown" in title
        # The summary counts the rows' own sentences (issue 24 item 11: "5 requeued" beside
        # rows saying "Still waiting in the queue", and the code server_restarted).
        chips = dialog.summary.text().split(" · ")
        sentences = [dialog.model.index(r, 4).data().lower() for r in range(12)]
        for chip in chips:
            n, phrase = chip.split(" ", 1)
            assert int(n) == sum(s.startswith(phrase) for s in sentences), chip
        assert sum(int(chip.split(" ", 1)[0]) for chip in chips) == 12
        assert "requeued" not in dialog.summary.text()
        assert "server_restarted" not in dialog.summary.text()
        model = dialog.model
        assert model.rowCount() == len(leftovers)
        for row in range(model.rowCount()):
            task_id = model.index(row, 0).data(TASK_ID)
            before, policy = leftovers[task_id]
            after, event = EXPECTED[(before, policy)]
            cells = [model.index(row, c).data() for c in range(model.columnCount())]
            assert cells[1] == MODEL
            assert cells[2] == f"{before} → {after}", (task_id, cells)
            assert cells[3] == policy
            assert cells[4] == SENTENCE[(before, after)], (task_id, cells)
            assert event in model.index(row, 4).data(3)  # the event written, in the tooltip
            # The sentence reads whole at the dialog's size (its column takes the room left).
            header = dialog.table.horizontalHeader()
            assert header.sectionSize(4) >= dialog.table.sizeHintForColumn(4), cells[4]

        # Show in Tasks: the chosen task is selected on the Tasks page.
        failed = next(t for t, k in leftovers.items() if k == ("running", "fail"))
        failed_row = next(
            r for r in range(model.rowCount()) if model.index(r, 0).data(TASK_ID) == failed
        )
        dialog.table.selectRow(failed_row)
        dialog.show_button.click()
        assert not dialog.isVisible()
        tasks = window.tasks
        await until(lambda: tasks.selected_ids() == [failed], what="the task selected")
        row = tasks.model.row_of(failed)
        assert row is not None
        assert tasks.model.index(row, COL_STATE).data() == "failed"
        assert "server_restarted" in tasks.model.index(row, COL_STATE).data(3)  # tooltip
    finally:
        if window is not None:
            window.quit()
        status = await asyncio.wait_for(app, 30)
    assert status == 0
    assert not (data_dir / "service.json").exists()


async def test_a_task_resumed_across_a_restart_shows_the_speed_of_its_own_run(
    qtbot: Any, tmp_path: Path
) -> None:
    """Leftovers of a killed run; the real demo model finishes them after the restart. The
    resumed task's Tok/s is that of the run after the resume (it said "—" while its tokens
    grew): the tokens since, over the time since that run's first token, and the tooltip
    says so; a task that started over shows its generation's speed; one ended by the
    recovery shows its killed run's, to its last event before the stop, and says so."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    leftovers = await leave_leftovers(data_dir)
    resumed = next(t for t, k in leftovers.items() if k == ("running", "resume"))
    retried = next(t for t, k in leftovers.items() if k == ("running", "retry"))
    failed = next(t for t, k in leftovers.items() if k == ("running", "fail"))
    cancelled = next(t for t, k in leftovers.items() if k == ("cancelling", "resume"))
    async with open_app(qtbot, data_dir) as (core, window):

        async def finished(task_id: str) -> bool:  # 6 tokens: incomplete at that limit
            return (await core.task(task_id))["state"] in ("completed", "incomplete")

        for task_id in (resumed, retried):
            await until(lambda t=task_id: finished(t), limit=120, what=f"{task_id} finished")
        rows = window.tasks.model

        def tps_cell(task_id: str) -> Any:
            row = rows.row_of(task_id)
            return None if row is None else rows.index(row, COL_TPS)

        def finished_row(task_id: str) -> bool:
            task = rows.task(task_id)
            return task is not None and task.finished_at is not None

        await until(lambda: finished_row(resumed) and finished_row(retried), what="rows")
        assert (await core.task(resumed))["output_tokens"] > 3  # it generated after the resume
        assert tps_cell(resumed).data() != "—", tps_cell(resumed).data(3)  # its run has a speed
        run = rows.task(resumed)
        assert run is not None and run.resumed_at is not None and run.finished_at is not None
        # Its own run's first token: after the resume (the killed run's is not kept).
        first = run.first_token_at
        assert first is not None and run.resumed_at < first < run.finished_at
        since = run.output_tokens - 3  # the 3 tokens kept from the killed run are not counted
        speed = float(tps_cell(resumed).data().removesuffix(" tok/s"))
        assert speed == pytest.approx(since / (run.finished_at - first), abs=0.06)
        tip = tps_cell(resumed).data(Qt.ItemDataRole.ToolTipRole)
        assert f"{since} tokens since" in tip and "the 3 from before it" in tip
        assert (
            float(tps_cell(retried).data().removesuffix(" tok/s")) > 0
        )  # started over: one run, a true speed
        assert "since the first token" in tps_cell(retried).data(Qt.ItemDataRole.ToolTipRole)
        # Ended by the recovery with the tokens of the killed run: that run's speed, its 3
        # tokens over the time to its last event before the stop (the leftovers wrote them
        # a few milliseconds after their start), never over the time up to the restart.
        for ended in (failed, cancelled):
            assert (await core.task(ended))["output_tokens"] == 3
            row = rows.task(ended)
            assert row is not None and row.started_at is not None and row.ran_until is not None
            ran = row.ran_until - row.started_at
            assert tps_cell(ended).data() == f"{3 / ran:.1f} tok/s", (ran, tps_cell(ended).data())
            tip = tps_cell(ended).data(Qt.ItemDataRole.ToolTipRole)
            assert "Ended by the restart: 3 tokens until its last event" in tip, tip
