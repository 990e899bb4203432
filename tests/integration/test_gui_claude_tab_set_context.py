"""The Claude Code tab for a model set to run with less than it was trained for (`models set
smollm2-135m-instruct --context 4096`): it says what the model runs with and what it was
trained for, not the trained context as what it holds, and, since even that is below Claude
Code's tools, that they need a model trained for more, with the line without them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.memory import ModelSettings
from lmsp_desktop.core.scopes import DEFAULT_SCOPES
from lmsp_desktop.gui.dialogs.connect_dialog import ConnectDialog
from tests.integration.gui_windows import MODEL, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def claude_tab(qtbot: Any, window: Any) -> str:
    window.connect_action.trigger()
    dialog = window.dialog
    assert isinstance(dialog, ConnectDialog)
    for scope, box in dialog.scope_boxes.items():
        box.setChecked(scope in DEFAULT_SCOPES)
    qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
    await until(lambda: dialog.token_line.text().startswith("lmsp_"), what="a token")
    await until(lambda: dialog.model_known, what="the model the snippets name")
    text = dialog.views["Claude Code"].toPlainText()
    dialog.reject()
    return text


async def test_the_claude_tab_says_the_context_a_set_model_runs_with(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine(["hi"])) as (core, window):
        await core.save_model_settings(MODEL, ModelSettings(context_length=4096))
        claude = await claude_tab(qtbot, window)
        assert "8,192 tokens:" not in claude, claude  # not what it holds: what it could
        assert f"# {MODEL} runs with 4,096 tokens and was trained for 8,192:\n" in claude
        assert "# Claude Code's tools need a model trained for more.\n" in claude
        assert "could run with" not in claude and "models set" not in claude  # cannot help
        assert f'claude --model {MODEL} --system-prompt "$SYSTEM" --tools ""' in claude
        # Its prose as wide as the tab's other comments (its commands, as "#   claude -p …",
        # fit the box: test_gui_connect.py's test_no_snippet_line_runs_past_the_box).
        prose = [line for line in claude.splitlines() if line.startswith("# ")]
        width = max(len(line) for line in prose if not line.startswith("#   "))
        assert width <= 80, claude
