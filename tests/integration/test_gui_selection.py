"""The selection is the truth: the details pane and both Cancel buttons act on exactly the rows
the table highlights (issue 16, defect 1, and "the details pane keeps a task the filter
hides"). A real core (store, runner, service) with a scripted engine that keeps a client's
task running while the test clicks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtWidgets import QPushButton

from lmsp_desktop.gui.dialogs.prompt_dialog import PromptDialog
from tests.integration.gui_windows import client_token, open_app, post_background, slow_engine
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def state_of(core: Any, task_id: str) -> str:
    return str((await core.task(task_id))["state"])


async def test_try_a_prompt_selects_the_new_task_and_cancel_stops_only_it(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        tasks = window.tasks
        other = await post_background(core, await client_token(core))
        await until(lambda: tasks.model.row_of(other) is not None, what="the client's row")
        tasks.table.selectRow(tasks.model.row_of(other))
        await until(lambda: tasks.details.task_id == other, what="details of the client's task")
        await until(lambda: tasks.details.state == "running", what="running")

        qtbot.mouseClick(tasks.try_button, Qt.MouseButton.LeftButton)
        await until(lambda: isinstance(window.dialog, PromptDialog), what="the prompt dialog")
        dialog = window.dialog
        dialog.prompt.setPlainText("Say hello.")
        qtbot.mouseClick(dialog.send, Qt.MouseButton.LeftButton)
        await until(lambda: bool(core_submitted(tasks, other)), what="the new task selected")
        mine = core_submitted(tasks, other)[0]

        # The pane shows the new task at once, and both Cancels act on it alone.
        await until(lambda: tasks.details.task_id == mine, what="details of the new task")
        await until(lambda: tasks.details.cancel_button.isEnabled(), what="its Cancel enabled")
        assert tasks.selected_ids() == [mine]
        # The header names it (whole in its tooltip: the line cuts the id for the model's name).
        header = tasks.details.header
        assert mine in header.toolTip() and other not in header.toolTip()
        assert mine[-8:] in header.text() and other[-8:] not in header.text()
        qtbot.mouseClick(tasks.details.cancel_button, Qt.MouseButton.LeftButton)
        await until(lambda: tasks.model.task(mine).state == "cancelled", what="mine cancelled")
        assert await state_of(core, other) == "running"
        assert not tasks.details.cancel_button.isEnabled()
        assert not tasks.cancel_button.isEnabled()


def core_submitted(tasks: Any, other: str) -> list[str]:
    """The selected rows, if the selection moved off the client's task."""
    ids = tasks.selected_ids()
    return ids if ids and other not in ids else []


async def test_pane_follows_the_current_row_and_leaves_a_task_the_filter_hides(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        tasks = window.tasks
        token = await client_token(core)
        first = await post_background(core, token)
        second = await post_background(core, token, model="smollm2-135m-instruct")
        await until(lambda: tasks.model.rowCount() == 2, what="two rows")
        tasks.table.selectRow(tasks.model.row_of(first))
        await until(lambda: tasks.details.task_id == first, what="first shown")

        # Ctrl-click the second row: both highlighted; the pane shows the row clicked last.
        index = tasks.model.index(tasks.model.row_of(second), 0)
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        tasks.table.selectionModel().setCurrentIndex(index, flags)
        await until(lambda: tasks.details.task_id == second, what="second shown")
        assert sorted(tasks.selected_ids()) == sorted([first, second])

        # Deselect the second: the pane goes back to what is still highlighted.
        tasks.table.selectionModel().select(
            index,
            QItemSelectionModel.SelectionFlag.Deselect | QItemSelectionModel.SelectionFlag.Rows,
        )
        await until(lambda: tasks.details.task_id == first, what="first shown again")

        # A filter that hides the shown task empties the pane and disables its Cancel.
        chip = next(b for b in tasks.chips.buttons() if b.text() == "Queued")
        assert isinstance(chip, QPushButton)
        qtbot.mouseClick(chip, Qt.MouseButton.LeftButton)  # first is running, not queued
        await until(lambda: tasks.model.row_of(first) is None, what="first filtered out")
        await until(lambda: tasks.details.task_id is None, what="pane emptied")
        assert not tasks.details.cancel_button.isEnabled()
        assert await state_of(core, first) == "running"
