"""Security prompts cannot be double-clicked through (issue 16, defect 5): after a card is
answered the next one, which moves up under the cursor, does not take a click for a moment;
a request for `admin` is unticked by default and marked. Real core, real window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_a_double_click_on_approve_does_not_approve_the_next_card(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        page = window.clients
        window.nav.setCurrentRow(2)
        first = await core.pairing.start("notebook", frozenset({"models:read"}), "127.0.0.1")
        second = await core.pairing.start(
            "unknown-tool", frozenset({"models:read", "admin"}), "127.0.0.1"
        )
        await until(lambda: len(page.cards) == 2, what="two cards")
        assert page.cards[1].scopes["admin"].isChecked() is False  # never pre-ticked
        assert page.cards[1].admin_note.isVisibleTo(page.cards[1])

        qtbot.mouseClick(page.cards[0].approve, Qt.MouseButton.LeftButton)
        await until(lambda: len(page.cards) == 1, what="the answered card gone")
        assert page.cards[0].request["pairing_id"] == second["pairing_id"]
        assert not page.cards[0].approve.isEnabled()
        qtbot.mouseClick(page.cards[0].approve, Qt.MouseButton.LeftButton)  # the 2nd click
        assert [r["pairing_id"] for r in await core.pending_pairings()] == [second["pairing_id"]]
        assert "Approved notebook" in page.notice.text()
        await until(lambda: page.cards[0].approve.isEnabled(), what="armed after a moment")
        answer = await core.pairing.poll(first["pairing_id"], first["pairing_secret"])
        assert answer["scopes"] == ["models:read"]
