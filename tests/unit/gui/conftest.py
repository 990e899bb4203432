"""GUI unit test fixtures: the window's fake core (the qasync loop is tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.storage.store import Store
from tests.support.gui_core import FakeCore
from tests.support.polling import until  # noqa: F401  (the old import path, for branches in flight)


@pytest.fixture
def core(store: Store, data_dir: Path) -> FakeCore:
    """The window's core: the real store and pairing, scripted models and runner."""
    return FakeCore(store, data_dir, PairingManager(store.db))
