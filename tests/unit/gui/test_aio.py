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


@pytest.mark.parametrize(
    "words",
    [
        "libshiboken: Internal C++ object (QLabel) already deleted.",
        # The Tasks table's counts signal emitted after its model was deleted (CI, load 10).
        "Signal source has been deleted",
        # A Models page read resumed by Qt's event processing after its loop stopped (CI).
        "no running event loop",
    ],
)
async def test_a_view_closed_while_its_update_awaited_shows_nothing(qtbot, words):
    before = len(boxes())
    gone = RuntimeError(words)
    task = aio.spawn(fail(gone))
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0.1)
    assert len(boxes()) == before


async def test_an_update_cut_short_by_the_close_shows_nothing(qtbot):
    """The window closed and the core stopped while a view's read was in flight: the closed
    store's error is no error for the user (CI saw a box at the close)."""
    before = len(boxes())
    aio.closing()
    try:
        closed = RuntimeError("Cannot operate on a closed database.")
        await asyncio.gather(aio.spawn(fail(closed)), return_exceptions=True)
        await asyncio.sleep(0.1)
        assert len(boxes()) == before
    finally:
        aio.closing(False)
    task = aio.spawn(fail(RuntimeError("a real bug")))  # open again: bugs show again
    await asyncio.gather(task, return_exceptions=True)
    await until(lambda: len(boxes()) == before + 1, what="the internal error box")
    for box in boxes():
        box.close()
