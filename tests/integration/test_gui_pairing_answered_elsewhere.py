"""A pairing request answered from a shell (`lmsp-desktop pairing deny|approve CODE` beside the
open window: another process, nothing told to the window) leaves the window within two
seconds, on every page: the twenty-first walk saw its card stay over 20 s and the sidebar
say "Clients (2 waiting)", and its Approve then gave a box naming an internal id. A card
answered here that a shell answered first says so in plain words, and goes. Real MainWindow
over a real core; the shell's answers are the real CLI, a process of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.gui.main_window import MainWindow
from tests.integration.gui_windows import open_app
from tests.integration.serve_process import lmsp
from tests.support.polling import until

pytestmark = pytest.mark.gui
SCOPES = frozenset({"responses:read", "responses:write"})


def in_a_shell(data_dir: Path, *args: str) -> str:
    done = lmsp(*args, data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    return done.stdout


def boxes(window: MainWindow) -> list[str]:
    return [box.text() for box in window.findChildren(QMessageBox) if box.isVisible()]


async def test_requests_answered_in_a_shell_leave_the_window(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        page = window.clients
        window.resize(1200, 780)
        laptop = await core.pairing.start("laptop-aider", SCOPES, "127.0.0.1")
        phone = await core.pairing.start("phone-chat", SCOPES, "127.0.0.1")
        tablet = await core.pairing.start("tablet", SCOPES, "127.0.0.1")
        await until(lambda: window.nav.item(2).text() == "Clients (3 waiting)", what="3 waiting")

        # On the Tasks page, a shell denies one: the sidebar counts it gone.
        window.nav.setCurrentRow(0)
        await asyncio.to_thread(in_a_shell, tmp_path, "pairing", "deny", laptop["user_code"])
        assert "laptop-aider" not in await asyncio.to_thread(
            in_a_shell, tmp_path, "pairing", "list"
        )
        await until(
            lambda: window.nav.item(2).text() == "Clients (2 waiting)",
            what=lambda: window.nav.item(2).text(),
        )

        # On the Clients page, the owner unticks a scope of the phone's card; a shell approves
        # the tablet: its card goes, the phone's card stays as the owner left it.
        window.nav.setCurrentRow(2)
        await until(
            lambda: [c.request["client_name"] for c in page.cards] == ["phone-chat", "tablet"]
        )
        phone_card = page.cards[0]
        phone_card.scopes["responses:write"].setChecked(False)
        await asyncio.to_thread(in_a_shell, tmp_path, "pairing", "approve", tablet["user_code"])
        await until(
            lambda: [c.request["client_name"] for c in page.cards] == ["phone-chat"],
            what=lambda: [c.request["client_name"] for c in page.cards],
        )
        assert page.cards[0] is phone_card
        assert phone_card.granted() == ["responses:read"]
        assert window.nav.item(2).text() == "Clients (1 waiting)"

        # A shell denies the phone while its card is still shown (before the window's next
        # look), and the owner clicks Approve on it: a plain line, not a box; the card goes.
        in_a_shell(tmp_path, "pairing", "deny", phone["user_code"])  # the window did not look
        assert page.cards == [phone_card] and phone_card.approve.isEnabled()
        qtbot.mouseClick(phone_card.approve, Qt.MouseButton.LeftButton)
        await until(lambda: not page.cards, what="the card gone")
        await until(lambda: page.notice.isVisible(), what="the answer's line")
        assert page.notice.text() == (
            "The request from phone-chat was already denied from another window or the "
            "command line; nothing changed."
        )
        assert boxes(window) == []
        assert window.nav.item(2).text() == "Clients"
        assert page.no_requests.isVisible()
        with pytest.raises(LmspError) as denied:  # the shell's answer stands
            await core.pairing.poll(phone["pairing_id"], phone["pairing_secret"])
        assert denied.value.code == "access_denied"
        window.grab().save(str(tmp_path / "answered-elsewhere.png"))


async def test_approve_on_a_card_a_shell_approved_says_so(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        page = window.clients
        window.nav.setCurrentRow(2)
        notebook = await core.pairing.start("notebook", SCOPES, "127.0.0.1")
        await until(lambda: len(page.cards) == 1, what="its card")
        in_a_shell(tmp_path, "pairing", "approve", notebook["user_code"])
        qtbot.mouseClick(page.cards[0].deny, Qt.MouseButton.LeftButton)
        await until(lambda: not page.cards, what="the card gone")
        await until(lambda: page.notice.isVisible(), what="the answer's line")
        assert "notebook was already approved from another window or the command line" in (
            page.notice.text()
        )
        assert boxes(window) == []
        answer = await core.pairing.poll(notebook["pairing_id"], notebook["pairing_secret"])
        assert answer["scopes"] == sorted(SCOPES)  # the shell's approval stands
