"""The copied curl example works as pasted (issue 16, defect 9). Real core, real window, real
curl. The tray (defect 10) is tested in test_gui_tray.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QGuiApplication

from lmsp_desktop.core.engines.fake import FakeEngine
from tests.integration.gui_windows import client_token, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command")
async def test_the_copied_curl_example_creates_a_task_as_pasted(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        token = await client_token(core)
        assert window.tasks.stack.currentWidget() is window.tasks.empty
        window.tasks.curl_button.click()
        assert "Copied" in window.tasks.curl_button.text()
        command = QGuiApplication.clipboard().text()
        shell = await asyncio.create_subprocess_exec(
            "sh",
            "-c",
            command,
            env={**os.environ, "LMSP_TOKEN": token},
            stdout=asyncio.subprocess.PIPE,
        )
        out, _ = await shell.communicate()
        answer = json.loads(out)
        assert answer.get("object") == "response", answer
        await until(lambda: window.tasks.model.row_of(answer["id"]) is not None, what="its row")
