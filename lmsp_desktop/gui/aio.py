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


def spawn(coro: Coroutine[Any, Any, Any], parent: QWidget | None = None) -> asyncio.Task[Any]:
    """Run `coro` on the loop, keep a reference until it ends, and show its error if any."""
    task = asyncio.ensure_future(coro)
    _running.add(task)

    def done(t: asyncio.Task[Any]) -> None:
        _running.discard(t)
        if not t.cancelled() and t.exception() is not None:
            alive = parent is not None and shiboken6.isValid(parent)
            show_error(parent if alive else None, t.exception())

    task.add_done_callback(done)
    return task


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
    box.open()
    return box
