"""Ignore is an answer, given late (issue 16, defect 11): the client keeps hearing
authorization_pending until the request expires, then access_denied (not expired_token, which
would make it ask again); the window and `pairing list` both still show it meanwhile."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.errors import LmspError
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_ignored_request_is_refused_once_it_expires_and_stays_listed(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        page = window.clients
        start = await core.pairing.start("spam-bot", frozenset({"models:read"}), "10.0.0.9")
        await until(lambda: len(page.cards) == 1, what="its card")
        qtbot.mouseClick(page.cards[0].ignore, Qt.MouseButton.LeftButton)
        await until(lambda: not page.cards, what="the card hidden")
        await until(lambda: page.ignored_note.isVisibleTo(page), what="the ignored note")
        assert "spam-bot" in page.ignored_note.text()
        listed = await core.pairing.pending(include_ignored=True)  # what `pairing list` shows
        assert [(r["client_name"], r["state"]) for r in listed] == [("spam-bot", "ignored")]

        with pytest.raises(LmspError) as waiting:
            await core.pairing.poll(start["pairing_id"], start["pairing_secret"])
        assert waiting.value.code == "authorization_pending"
        core.pairing.clock = lambda: time.time() + core.pairing.expires_in + 1
        with pytest.raises(LmspError) as refused:
            await core.pairing.poll(start["pairing_id"], start["pairing_secret"])
        assert refused.value.code == "access_denied"
