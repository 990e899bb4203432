"""Integration fixtures: a real Core and its real window for the GUI tests (marked `gui`, so
they run on tests/conftest.py's qasync loop). Qt is imported lazily so that the non-GUI tests
here never load PySide6 through this file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.polling import until  # noqa: F401  (the old import path, for branches in flight)


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
            window.stop_updates()
            window.hide()
        await core.stop()
