"""Core.open binds the port before the database changes in any way: a start blocked by a port
in use neither migrates an older database (nor backs it up) nor gives a new one its schema,
and the port it tries is the one the stored settings name (read before the migration)."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.lock import DataDirLock
from lmsp_desktop.core.models.sources import SOURCES
from lmsp_desktop.core.storage.store import Store
from tests.unit.core.test_migrations import a_database_with_one_task, one_more_migration, pragma


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another program listens on."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def core_on(data_dir: Path, port: int | None = None) -> Core:
    return Core(
        data_dir, port=port, engine=FakeEngine(), include_demo=False, no_sources=list(SOURCES)
    )


async def refused(core: Core, port: int) -> None:
    with pytest.raises(LmspError) as caught:
        await core.open()
    await core.stop()  # as `serve` and the window do after a failed start
    assert caught.value.code == "port_in_use"
    assert f"Port {port} on 127.0.0.1 is in use" in caught.value.message
    again = DataDirLock(core.data_dir)  # the data directory is free again
    again.acquire()
    again.release()


async def test_an_older_database_is_not_migrated_by_a_start_that_cannot_listen(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, taken_port: int
) -> None:
    await a_database_with_one_task(data_dir)
    store = Store(data_dir)  # the port comes from the stored settings, not a flag
    await store.open()
    await store.save_settings(dataclasses.replace(await store.settings(), port=taken_port))
    await store.close()
    path = database_path(data_dir)
    before = path.read_bytes()
    version = pragma(path, "user_version")
    one_more_migration(monkeypatch, "ALTER TABLE tasks ADD COLUMN priority INTEGER;\n")

    await refused(core_on(data_dir), taken_port)

    assert path.read_bytes() == before
    assert pragma(path, "user_version") == version
    assert list(data_dir.glob("*.bak")) == []


async def test_a_new_database_gets_no_schema_from_a_start_that_cannot_listen(
    data_dir: Path, taken_port: int
) -> None:
    await refused(core_on(data_dir, taken_port), taken_port)
    assert pragma(database_path(data_dir), "user_version") == 0
    core = core_on(data_dir, 0)  # the next start, on a free port, makes it
    url = await core.start()
    try:
        assert url.startswith("http://127.0.0.1:")
        assert pragma(database_path(data_dir), "user_version") != 0
    finally:
        await core.stop()
