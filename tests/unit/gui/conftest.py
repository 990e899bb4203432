"""GUI test fixtures: async tests run on a qasync loop that shares pytest-qt's QApplication."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import qasync
from PySide6.QtWidgets import QApplication

from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.storage.store import Store
from tests.support.gui_core import FakeCore
from tests.support.polling import until  # noqa: F401  (the old import path, for branches in flight)


def _qasync_loop() -> asyncio.AbstractEventLoop:
    app = QApplication.instance() or QApplication([])
    # As `lmsp-desktop` runs it: closing or hiding windows never quits the loop by itself.
    app.setQuitOnLastWindowClosed(False)
    return qasync.QEventLoop(app)


def pytest_asyncio_loop_factories(config: Any, item: Any) -> dict[str, Any]:
    return {"qasync": _qasync_loop}


HERE = Path(__file__).parent


@pytest.fixture
def core(store: Store, data_dir: Path) -> FakeCore:
    """The window's core: the real store and pairing, scripted models and runner."""
    return FakeCore(store, data_dir, PairingManager(store.db))


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    # The offscreen platform warns on every shown window that it cannot propagate size
    # hints; that says nothing about our code, every other Qt warning still fails a test.
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.qt_log_ignore("propagateSizeHints"))
