"""Clients in one click ("Beyond the fixes"): Connect a client makes a token in the app, shows
it once, and its snippets work as pasted (curl run for real against the real service)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.dialogs.connect_dialog import ConnectDialog
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command")
async def test_connect_a_client_makes_a_token_and_its_curl_works_as_pasted(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        window.nav.setCurrentRow(2)
        qtbot.mouseClick(window.clients.connect_button, Qt.MouseButton.LeftButton)
        dialog = window.dialog
        assert isinstance(dialog, ConnectDialog)
        dialog.name.setText("notebook")
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.token_line.text().startswith("lmsp_"), what="a token")
        token = dialog.token_line.text()
        qtbot.mouseClick(dialog.copy_token, Qt.MouseButton.LeftButton)
        assert QGuiApplication.clipboard().text() == token
        assert dialog.copy_token.text() == "Copied ✓"
        await until(lambda: window.clients.model.rowCount() == 1, what="the client listed")

        dialog.tabs.setCurrentIndex(0)  # curl
        qtbot.mouseClick(dialog.copy_snippet, Qt.MouseButton.LeftButton)
        command = QGuiApplication.clipboard().text()
        assert token in command and f"{core.url}/v1/responses" in command
        shell = await asyncio.create_subprocess_exec(
            "sh", "-c", command, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await shell.communicate()
        answer = json.loads(out)
        assert answer.get("object") == "response" and answer["status"] == "completed", answer
        for title in ("Python (openai)", "JavaScript (openai)", "Codex CLI", "LangChain"):
            assert f"{core.url}/v1" in dialog.views[title].toPlainText()


async def test_the_snippet_tabs_stay_put_when_the_token_appears(qtbot: Any, tmp_path: Path) -> None:
    """Create token, then a click on a tab: the tab must still be where the user aimed (the
    longer note after Create token wrapped to a second line and pushed the tabs down)."""
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (_, window):
        window.nav.setCurrentRow(2)
        qtbot.mouseClick(window.clients.connect_button, Qt.MouseButton.LeftButton)
        dialog = window.dialog
        assert isinstance(dialog, ConnectDialog)
        await asyncio.sleep(0.1)
        tabs_before = dialog.tabs.geometry()
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.token_line.text().startswith("lmsp_"), what="a token")
        await asyncio.sleep(0.1)
        assert dialog.tabs.geometry() == tabs_before
        assert dialog.base in dialog.note.text()
