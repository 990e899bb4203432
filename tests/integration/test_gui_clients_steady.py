"""The Clients page stays put while pairing requests come and go, and an answer's line fades.
A walk found the paired-clients table and its buttons moving ~160 px as a card appeared or
went (a click meant for Revoke… landed on empty table space, or on the card that had taken
its place), and "Approved laptop-aider…" still shown minutes later. Real core (store, pairing
manager), real MainWindow, real clicks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtWidgets import QWidget

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.pages import clients_page
from tests.integration.gui_windows import client_token, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def settle() -> None:
    """Let layouts and repaints run (sleeping runs Qt's loop; never processEvents())."""
    for _ in range(5):
        await asyncio.sleep(0.05)


def place(widget: QWidget, window: QWidget) -> QRect:
    return QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())


async def test_cards_coming_and_going_move_neither_the_table_nor_its_buttons(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clients_page, "NOTICE_MS", 300)  # the real one is 8 s
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        await client_token(core, "bot-01")  # a paired client to revoke
        window.resize(900, 600)  # the smallest window
        window.nav.setCurrentRow(2)
        page = window.clients
        await until(lambda: page.model.rowCount() == 1, what="the paired client")
        await settle()

        def places() -> tuple[QRect, QRect, QRect]:
            return (
                place(page.table, window),
                place(page.revoke_button, window),
                place(page.scopes_button, window),
            )

        before = places()
        assert page.no_requests.isVisible()  # the area says what comes there

        await core.pairing.start(
            "laptop-aider", frozenset({"responses:read", "models:read", "admin"}), "192.168.1.23"
        )
        await until(lambda: len(page.cards) == 1, what="the card")
        await settle()
        assert places() == before, (places(), before)
        # The card, even one asking for admin (the tallest: its warning), is whole in its
        # area, its answers in view without scrolling.
        card = page.cards[0]
        area = page.requests_area.viewport()
        assert area.rect().contains(place(card.approve, area)), (place(card.approve, area), area)
        assert not page.no_requests.isVisible()

        await until(card.approve.isEnabled, what="Approve armed")
        qtbot.mouseClick(card.approve, Qt.MouseButton.LeftButton)
        await until(lambda: not page.cards, what="the answered card gone")
        await until(page.notice.isVisible, what="the answer's line")
        assert "Approved laptop-aider" in page.notice.text()
        await settle()
        assert places() == before, (places(), before)
        # The line fades after a while (NOTICE_MS), the table still where it was.
        await until(lambda: not page.notice.isVisible(), 10, "the line faded")
        await settle()
        assert places() == before
