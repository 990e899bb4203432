"""Shared fixtures: offscreen Qt, a fresh data directory, an open store."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from lmsp_desktop.core.storage.store import Store


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
async def store(data_dir: Path) -> AsyncIterator[Store]:
    opened = Store(data_dir)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()
