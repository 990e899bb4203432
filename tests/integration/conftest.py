"""Integration fixtures: the GUI tests (test_gui_*.py) run on a qasync loop with a real window.

Only modules named test_gui_* get the qasync loop (sharing pytest-qt's QApplication); every
other async test in this folder keeps a plain asyncio loop, as it had before this file.
Qt is imported lazily so that the non-GUI tests here never load PySide6 through this file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.polling import until  # noqa: F401  (the old import path, for branches in flight)

HERE = Path(__file__).parent


def _is_gui(item: Any) -> bool:
    module = getattr(item, "module", None)
    name = getattr(module, "__name__", "") or ""
    return name.rsplit(".", 1)[-1].startswith("test_gui_")


def _qasync_loop() -> asyncio.AbstractEventLoop:
    import qasync
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication([])
    # As `lmsp-desktop` runs it: closing or hiding windows never quits the loop by itself.
    app.setQuitOnLastWindowClosed(False)
    loop: asyncio.AbstractEventLoop = qasync.QEventLoop(app)
    return loop


def pytest_asyncio_loop_factories(config: Any, item: Any) -> dict[str, Any]:
    # The hook must answer for every item below this folder; asyncio.new_event_loop is what
    # pytest-asyncio's runner uses when no hook exists, so the other tests are unchanged.
    if _is_gui(item):
        return {"qasync": _qasync_loop}
    return {"asyncio": asyncio.new_event_loop}


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    # The offscreen platform warns on every shown window that it cannot propagate size
    # hints; that says nothing about our code, every other Qt warning still fails a test.
    for item in items:
        if HERE in Path(item.path).parents and _is_gui(item):
            item.add_marker(pytest.mark.qt_log_ignore("propagateSizeHints"))


@pytest.fixture
async def gui_app(qtbot: Any, tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """A real Core (port 0, real demo model) started as `lmsp-desktop` does, and its window."""
    import shiboken6
    from PySide6.QtCore import QSettings

    from lmsp_desktop.app import Core
    from lmsp_desktop.gui.main_window import MainWindow

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    core = Core(data_dir, port=0)
    await core.open()
    await core.scan_models()
    await core.start_service()
    window = MainWindow(core, QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(window)
    try:
        window.show()
        await window.load()
        yield core, window
    finally:
        window.quitting = True  # the teardown closes the window: no question asked then
        if shiboken6.isValid(window.bridge):
            window.bridge.close()
            window.hide()
        await core.stop()
