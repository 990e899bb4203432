"""The qasync loop GUI tests run on, and the rule that says which tests are GUI tests.

Qt is imported only when a GUI test asks for the loop, so the core's tests never load PySide6.
"""

from __future__ import annotations

import asyncio
from typing import Any


def qasync_loop() -> asyncio.AbstractEventLoop:
    """A qasync loop on pytest-qt's QApplication (made here if no test made one yet)."""
    import qasync
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    # As `lmsp-desktop` runs it: closing or hiding windows never quits the loop by itself.
    app.setQuitOnLastWindowClosed(False)
    loop: asyncio.AbstractEventLoop = qasync.QEventLoop(app)
    return loop


def is_gui(item: Any) -> bool:
    """A GUI test is marked `gui` (module-level `pytestmark = pytest.mark.gui`) or uses Qt's
    application through a fixture (qapp, qtbot, qtmodeltester), as qutebrowser decides it."""
    if item.get_closest_marker("gui") is not None:
        return True
    return "qapp" in getattr(item, "fixturenames", ())
