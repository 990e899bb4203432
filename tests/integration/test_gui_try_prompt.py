""" "Try a prompt…" over a real core: the dialog says how long an answer may be and the task
stops there (a chatty model otherwise writes until its whole context is full)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.dialogs.prompt_dialog import PromptDialog
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_a_prompt_from_the_window_stops_at_the_answer_length_the_dialog_states(
    qtbot: Any, tmp_path: Path
) -> None:
    chatty = FakeEngine([f" w{i}" for i in range(2000)])  # would go on for 2,000 tokens
    async with open_app(qtbot, tmp_path, engine=chatty) as (core, window):
        tasks = window.tasks
        qtbot.mouseClick(tasks.try_button, Qt.MouseButton.LeftButton)
        await until(lambda: isinstance(window.dialog, PromptDialog), what="the prompt dialog")
        dialog = window.dialog
        assert dialog.max_output.text() == "512 tokens"  # stated, next to the Model
        qtbot.mouseClick(dialog.send, Qt.MouseButton.LeftButton)
        await until(lambda: bool(tasks.selected_ids()), what="the new task selected")
        (task_id,) = tasks.selected_ids()
        await until(lambda: tasks.model.task(task_id).state == "incomplete", what="stopped")
        assert tasks.model.task(task_id).output_tokens == 512
        row = await core.task(task_id)
        assert row["incomplete_reason"] == "max_output_tokens"
