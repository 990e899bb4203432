"""Settings › Service › Browser origins allowed: the user lets a web page call the service,
a mistyped origin is refused in the dialog with what to write, the saved origin applies at
once (no restart), and a `--allow-origin` flag applies to its run without being saved.
Real core, real window, real HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from lmsp_desktop.core.engines.fake import FakeEngine
from tests.integration.gui_windows import client_token, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui

PAGE = "http://localhost:3000"
FLAGGED = "app://obsidian.md"


async def page_status(url: str, token: str, origin: str) -> tuple[int, str | None]:
    headers = {"Origin": origin, "Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(url) as http, http.get("/v1/models", headers=headers) as r:
        return r.status, r.headers.get("Access-Control-Allow-Origin")


async def test_an_origin_saved_in_settings_lets_its_page_in_at_once(
    qtbot: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    async with open_app(qtbot, data, engine=FakeEngine(), allowed_origins=[FLAGGED]) as (
        core,
        window,
    ):
        token = await client_token(core)
        assert await page_status(core.url, token, PAGE) == (403, None)
        assert await page_status(core.url, token, FLAGGED) == (200, FLAGGED)

        window.open_settings()
        dialog = window.dialog
        assert dialog.origins.text() == ""  # the flag's origin is this run's, not a setting
        # named whole, on one line (wrapped at its hyphen it read as two words)
        assert "    --allow-origin app://obsidian.md" in dialog.flag_note.text().splitlines()
        save = dialog.buttons.button(QDialogButtonBox.StandardButton.Save)
        dialog.origins.setText("localhost:3000")  # what people type first
        qtbot.mouseClick(save, Qt.MouseButton.LeftButton)
        await until(lambda: "not a browser origin" in dialog.error.text(), what="the error")
        assert dialog.isVisible() and "http://localhost:3000" in dialog.error.text()
        assert await page_status(core.url, token, PAGE) == (403, None)

        dialog.origins.setText(PAGE)
        qtbot.mouseClick(save, Qt.MouseButton.LeftButton)
        await until(lambda: not dialog.isVisible(), what=lambda: dialog.error.text() or "saved")
        assert await page_status(core.url, token, PAGE) == (200, PAGE)
        assert await page_status(core.url, token, FLAGGED) == (200, FLAGGED)  # still, this run
        assert core.stored_settings.allowed_origins == [PAGE]
