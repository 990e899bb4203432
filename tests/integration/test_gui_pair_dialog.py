"""One-time codes are one-time (issue 16, defect 6), played as the user does it: Clients →
"Pair a client…", read the code, then New code / tick a scope / Close / let a client use it,
while a real HTTP client tries the codes on the real service (`POST /v1/pairing/claim`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QDialogButtonBox, QLabel

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.dialogs.pair_dialog import PairDialog, lan_address
from lmsp_desktop.gui.dialogs.settings_dialog import SettingsDialog
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def claim(url: str, code: str, name: str = "phone") -> tuple[int, dict[str, Any]]:
    """What a client gets for a code: the HTTP status and the JSON answer."""
    async with (
        aiohttp.ClientSession(url) as http,
        http.post("/v1/pairing/claim", json={"code": code, "client_name": name}) as answer,
    ):
        return answer.status, await answer.json()


async def refused(url: str, code: str) -> bool:
    status, body = await claim(url, code)
    return status >= 400 and "access_token" not in body


async def pair_dialog(qtbot: Any, window: Any) -> tuple[PairDialog, str]:
    """Clients page → Pair a client…; the dialog and the first code it shows."""
    window.nav.setCurrentRow(2)
    qtbot.mouseClick(window.clients.pair_button, Qt.MouseButton.LeftButton)
    dialog = await until(lambda: window.dialog if isinstance(window.dialog, PairDialog) else None)
    await until(lambda: "-" in dialog.code_label.text(), what="a code")
    return dialog, dialog.code_label.text()


async def test_new_code_ends_the_code_shown_before(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        dialog, first = await pair_dialog(qtbot, window)
        qtbot.mouseClick(dialog.new_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.code_label.text() not in (first, "…"), what="a new code")
        second = dialog.code_label.text()
        assert await refused(core.url, first), "the code replaced by New code still works"
        status, body = await claim(core.url, second)
        assert status == 200 and body["access_token"], body


async def test_ticking_a_scope_shows_a_new_code_and_ends_the_old(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        dialog, first = await pair_dialog(qtbot, window)
        qtbot.mouseClick(dialog.scope_boxes["models:read"], Qt.MouseButton.LeftButton)
        assert not dialog.scope_boxes["models:read"].isChecked()
        await until(
            lambda: dialog.code_label.text() not in (first, "…"),
            limit=10,
            what=lambda: f"a code for the new scopes; still shows {dialog.code_label.text()}",
        )
        assert await refused(core.url, first), "the code for the old scopes still works"
        status, body = await claim(core.url, dialog.code_label.text())
        assert status == 200, body
        assert body["scopes"] == ["responses:read", "responses:write"]


async def test_close_ends_the_last_code(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        dialog, code = await pair_dialog(qtbot, window)
        buttons = dialog.findChild(QDialogButtonBox)
        qtbot.mouseClick(
            buttons.button(QDialogButtonBox.StandardButton.Close), Qt.MouseButton.LeftButton
        )
        assert not dialog.isVisible()

        async def no_live_code() -> bool:
            row = await core.store.db.fetchone(
                "SELECT count(*) AS n FROM pairings WHERE kind='claim' AND state='pending'"
            )
            return row is not None and row["n"] == 0

        for _ in range(100):  # the end is written as the dialog closes; give it that moment
            if await no_live_code():
                break
            await asyncio.sleep(0.05)
        assert await refused(core.url, code), "the code of a closed dialog still works"


async def test_the_dialog_says_who_used_the_code(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        dialog, code = await pair_dialog(qtbot, window)
        assert "Works once" in dialog.expiry.text()
        status, body = await claim(core.url, code, "notebook")
        assert status == 200, body
        await until(
            lambda: "Used by notebook" in dialog.expiry.text(),
            limit=10,
            what=lambda: f"'Used by notebook'; the dialog says {dialog.expiry.text()!r}",
        )
        assert "Works once" not in dialog.expiry.text()


def test_the_qr_address_is_one_other_devices_can_reach() -> None:
    from lmsp_desktop.gui.dialogs.pair_dialog import reachable_url

    assert reachable_url("http://127.0.0.1:5677", "127.0.0.1") is None
    assert reachable_url("http://192.168.1.5:5677", "192.168.1.5") == "http://192.168.1.5:5677"
    every = reachable_url("http://0.0.0.0:5677", "0.0.0.0")
    assert every is None or not every.startswith("http://0.0.0.0")


def qr_fields(text: str) -> dict[str, str]:
    """The QR code's lines as a phone shows them ("URL: …", "Code: …")."""
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


async def test_on_loopback_there_is_no_qr_code_and_the_dialog_says_why(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (_core, window):
        dialog, _code = await pair_dialog(qtbot, window)
        assert not dialog.qr.isVisible(), "a QR code of an address no other device can reach"
        assert "Other devices cannot reach this service" in dialog.network_note.text()
        texts = [label.text() for label in dialog.findChildren(QLabel)]
        assert not any("QR code" in text for text in texts), texts  # no QR code to scan
        # No empty room where a QR code would be: the scopes come right after the text.
        hint = dialog.claim_hint
        scopes = next(label for label in dialog.findChildren(QLabel) if "Scopes" in label.text())
        gap = scopes.mapTo(dialog, QPoint(0, 0)).y() - hint.mapTo(dialog, QPoint(0, 0)).y()
        gap -= hint.height()
        assert gap <= 2 * dialog.layout().spacing(), f"{gap} px of empty room under the text"
        # ...and the hint takes the width it has, one line (it broke at half width).
        assert hint.text().count("\n") == 0 and "at POST /v1/pairing/claim" in hint.text()
        # The hint names the control Settings really has (its label, not an address to type).
        window.open_settings()
        settings = window.dialog
        assert isinstance(settings, SettingsDialog)
        choice = settings.network.text().split(" (")[0]
        settings.reject()
        assert f"tick “{choice}” in File ▸ Settings" in dialog.network_note.text()
        assert "0.0.0.0" not in dialog.network_note.text()


async def test_on_the_network_the_qr_code_carries_an_address_that_works(
    qtbot: Any, tmp_path: Path
) -> None:
    lan = lan_address()  # the dialog's own way of finding it
    if lan is None:
        pytest.skip("this machine has no network address to serve on")
    async with open_app(qtbot, tmp_path, engine=FakeEngine(), host=lan) as (_core, window):
        dialog, code = await pair_dialog(qtbot, window)
        assert dialog.qr.isVisible()
        assert "or scans the QR code" in dialog.claim_hint.text()
        fields = qr_fields(dialog.qr.text)
        assert {"URL", "Code"} <= fields.keys(), f"the QR code holds {dialog.qr.text!r}"
        assert fields["URL"].startswith(f"http://{lan}:"), fields
        assert fields["Code"] == code
        # What a phone does with it: the URL and code as scanned, on that address.
        status, body = await claim(fields["URL"].removesuffix("/v1"), fields["Code"], "phone")
        assert status == 200 and body["access_token"], body
