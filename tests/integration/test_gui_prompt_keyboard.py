""" "Try a prompt…" by keyboard, as a reviewer walked it in a real window: the example prompt
starts selected, so the first Tab replaced it with a tab character, every further Tab added
another, and focus never reached Model or Send; Ctrl+Enter sent, but nothing said so. Real
core (store, registry, runner) with the scripted engine, real MainWindow, real key events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDialogButtonBox, QWidget

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.dialogs.prompt_dialog import PromptDialog
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui

EXAMPLE = "Write a haiku about a lighthouse keeper."


def press(
    dialog: PromptDialog, key: Qt.Key, modifier: Any = Qt.KeyboardModifier.NoModifier
) -> QWidget:
    """The key where the keyboard is now (the dialog's focused widget); where it is after."""
    focused = dialog.focusWidget()
    assert focused is not None, "nothing in the dialog has the keyboard"
    QTest.keyClick(focused, key, modifier)
    after = dialog.focusWidget()
    assert after is not None
    return after


async def test_tab_walks_the_prompt_dialog_and_ctrl_enter_sends_the_prompt_kept(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        tasks = window.tasks
        qtbot.mouseClick(tasks.try_button, Qt.MouseButton.LeftButton)
        await until(
            lambda: isinstance(window.dialog, PromptDialog) and window.dialog.isVisible(),
            what="the prompt dialog",
        )
        dialog: PromptDialog = window.dialog
        assert dialog.focusWidget() is dialog.prompt  # typing replaces the example
        # The dialog says how to send without the mouse.
        assert "Ctrl+Enter sends" in dialog.hint.text()
        cancel = dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel)
        # Tab goes on to Send, Cancel, Model, Answer up to, and back to the prompt, which is
        # as it was: no tab typed over the example.
        visited = [press(dialog, Qt.Key.Key_Tab) for _ in range(5)]
        assert visited == [dialog.send, cancel, dialog.model, dialog.max_output, dialog.prompt]
        assert dialog.prompt.toPlainText() == EXAMPLE
        # Shift+Tab goes back the same way.
        assert press(dialog, Qt.Key.Key_Backtab, Qt.KeyboardModifier.ShiftModifier) is (
            dialog.max_output
        )
        press(dialog, Qt.Key.Key_Tab)
        # Ctrl+Enter from the prompt sends it: the task is selected in the Tasks table.
        QTest.keyClick(dialog.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
        await until(lambda: bool(tasks.selected_ids()), what="the new task selected")
        (task_id,) = tasks.selected_ids()
        row = await core.task(task_id)
        assert EXAMPLE in row["request"], row["request"]
