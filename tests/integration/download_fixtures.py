"""Fixtures for the download tests: a fake hub with a few repos on loopback, HF_ENDPOINT and
HF_HUB_CACHE pointed at it and at a temp cache, and a store with a DownloadManager.

Use with `pytest_plugins = ["tests.integration.download_fixtures"]`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.storage.store import Store
from tests.support.fake_hub import FakeHub
from tests.support.hub_repos import Hub, hub_repos


@pytest.fixture
async def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hub]:
    server = FakeHub(hub_repos())
    await server.start()
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        yield Hub(server, cache)
    finally:
        await server.stop()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = Store(tmp_path / "data")
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def manager(store: Store) -> AsyncIterator[DownloadManager]:
    manager = DownloadManager(store.tasks, progress_every=0.1)
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()
