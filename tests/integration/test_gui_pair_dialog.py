"""One-time codes are one-time (issue 16, defect 6): New code and Close end the shown code at
once, ticking scopes makes a new code, the dialog says who used it, and the QR code carries
an address other devices can reach (none on loopback). Real core, real window."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.gui.dialogs.pair_dialog import PairDialog, reachable_url
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def claim(core: Any, code: str, name: str = "phone") -> dict[str, Any]:
    return dict(await core.pairing.claim(code, name, "127.0.0.1"))


async def test_codes_end_with_new_code_and_close_and_say_who_used_them(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        window.open_pair()
        dialog = window.dialog
        assert isinstance(dialog, PairDialog)
        await until(lambda: dialog.code_label.text() != "…", what="a code")
        first = dialog.code_label.text()
        qtbot.mouseClick(dialog.new_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.code_label.text() != first, what="a new code")
        with pytest.raises(LmspError):
            await claim(core, first)  # the old code ended with New code

        second = dialog.code_label.text()
        dialog.scope_boxes["models:read"].setChecked(False)  # fewer scopes: another code
        await until(lambda: dialog.code_label.text() != second, what="a code for the scopes")
        with pytest.raises(LmspError):
            await claim(core, second)
        third = dialog.code_label.text()
        answer = await claim(core, third, "notebook")
        assert answer["scopes"] == ["responses:read", "responses:write"]
        await until(lambda: "Used by notebook" in dialog.expiry.text(), what="used by")

        qtbot.mouseClick(dialog.new_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.code_label.text() != third, what="one more code")
        fourth, fourth_id = dialog.code_label.text(), dialog.pairing_id
        assert fourth_id is not None
        dialog.close()
        for _ in range(100):  # the end is written as the dialog closes
            if (await core.pairing.claim_code_status(fourth_id))["state"] == "dead":
                break
            await asyncio.sleep(0.02)
        with pytest.raises(LmspError):
            await claim(core, fourth)


def test_the_qr_address_is_one_other_devices_can_reach() -> None:
    assert reachable_url("http://127.0.0.1:5677", "127.0.0.1") is None
    assert reachable_url("http://192.168.1.5:5677", "192.168.1.5") == "http://192.168.1.5:5677"
    every = reachable_url("http://0.0.0.0:5677", "0.0.0.0")
    assert every is None or not every.startswith("http://0.0.0.0")
