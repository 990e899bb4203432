"""Errors of coroutines started from the GUI: sentences for the user, silence for closed views."""

from __future__ import annotations

import asyncio

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.gui import aio
from tests.support.polling import until

pytestmark = pytest.mark.gui


def boxes() -> list[QMessageBox]:
    return [
        w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()
    ]


async def fail(exc: BaseException) -> None:
    await asyncio.sleep(0)
    raise exc


async def test_an_error_a_user_can_act_on_is_shown_as_its_sentence(qtbot):
    task = aio.spawn(fail(LmspError("Port 5677 is in use. Choose another port.", code="x")))
    await asyncio.gather(task, return_exceptions=True)
    await until(lambda: any("Port 5677 is in use" in b.text() for b in boxes()), what="the box")
    shown = [b for b in boxes() if "Port 5677 is in use" in b.text()]
    assert len(shown) == 1
    shown[0].close()


async def test_a_view_closed_while_its_update_awaited_shows_nothing(qtbot):
    before = len(boxes())
    gone = RuntimeError("libshiboken: Internal C++ object (QLabel) already deleted.")
    task = aio.spawn(fail(gone))
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0.1)
    assert len(boxes()) == before
