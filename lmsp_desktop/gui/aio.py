"""Small helpers for running coroutines from Qt code and showing their errors as sentences."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Coroutine
from typing import Any

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

from lmsp_desktop.core.errors import LmspError

log = logging.getLogger(__name__)
_running: set[asyncio.Task[Any]] = set()
_open_boxes: set[QMessageBox] = set()
_closing = False  # set by closing(): the window stops, the core after it


def closing(now: bool = True) -> None:
    """The window is closing and the core stops after it (MainWindow.stop_updates), or a
    window opens again (`now` False). A view update still in flight then fails on the closed
    store: nothing went wrong for the user (CI saw the events pane's last read show an
    internal-error box at the close), so it is logged, not shown."""
    global _closing
    _closing = now


def spawn(coro: Coroutine[Any, Any, Any], parent: QWidget | None = None) -> asyncio.Task[Any]:
    """Run `coro` on the loop, keep a reference until it ends, and show its error if any."""
    task = asyncio.ensure_future(coro)
    _running.add(task)

    def done(t: asyncio.Task[Any]) -> None:
        _running.discard(t)
        if t.cancelled() or t.exception() is None:
            return
        alive = parent is not None and shiboken6.isValid(parent)
        if _closing:
            log.debug("an update cut short by the close", exc_info=t.exception())
            return
        if _widget_gone(t.exception()):
            # The widget this coroutine was updating was closed while it awaited the store:
            # nothing is left to update and nothing went wrong for the user.
            log.debug("a view closed while its update ran", exc_info=t.exception())
            return
        show_error(parent if alive else None, t.exception())

    task.add_done_callback(done)
    return task


def _widget_gone(exc: BaseException | None) -> bool:
    """The widget (or a signal's source) it updated was deleted while it awaited, or it
    resumed after its loop stopped (the app, or a test, ending: the fresh-clone CI under
    load saw both as error boxes)."""
    words = ("already deleted", "Signal source has been deleted", "no running event loop")
    return isinstance(exc, RuntimeError) and any(w in str(exc) for w in words)


def error_text(exc: BaseException | None) -> str:
    """An LmspError's own sentence; anything else is a bug, logged with a reference."""
    if isinstance(exc, LmspError):
        return exc.message
    ref = secrets.token_hex(3)
    log.error("internal error (reference %s)", ref, exc_info=exc)
    return (
        f"Something went wrong inside LMSP Desktop (reference {ref}). Nothing you did caused "
        "it; the details are in the log. Try again, and report it if it keeps happening."
    )


def show_error(parent: QWidget | None, exc: BaseException | None) -> QMessageBox:
    """A non-blocking message box with the error as a sentence."""
    box = QMessageBox(
        QMessageBox.Icon.Warning,
        "LMSP Desktop",
        error_text(exc),
        QMessageBox.StandardButton.Ok,
        parent,
    )
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    if parent is None:
        # Nothing else owns a parentless box: without this reference Python deletes it (and
        # the message with it) as soon as the caller returns.
        _open_boxes.add(box)
        box.finished.connect(lambda *_: _open_boxes.discard(box))
    box.open()
    return box
