"""Opening the database: schema versions, refusing what it cannot use, private files."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.errors import StorageFullError
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage import db as db_module
from lmsp_desktop.core.storage.db import Database, DatabaseError
from lmsp_desktop.core.storage.recovery import recover
from lmsp_desktop.core.storage.schema import CURRENT_VERSION, MIGRATIONS
from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import create, drive, new_task

TABLES = {
    "service_config",
    "clients",
    "models",
    "responses",
    "tasks",
    "task_events",
    "idempotency_keys",
    "recovery_reports",
}


def pragma(path: Path, name: str) -> object:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


async def test_fresh_database_gets_the_current_schema(data_dir: Path) -> None:
    store = Store(data_dir)
    await store.open()
    try:
        assert await store.db.user_version() == CURRENT_VERSION == len(MIGRATIONS)
        rows = await store.db.fetchall("SELECT name FROM sqlite_master WHERE type='table'")
        assert {r["name"] for r in rows} >= TABLES
        mode = await store.db.fetchone("PRAGMA journal_mode")
        assert mode is not None and mode[0] == "wal"
        assert store.service_id.startswith("svc_")
    finally:
        await store.close()
    assert pragma(database_path(data_dir), "user_version") == CURRENT_VERSION


async def test_reopening_keeps_data_and_identity(data_dir: Path) -> None:
    store = Store(data_dir)
    await store.open()
    task_id = await create(store.tasks)
    service_id = store.service_id
    await store.close()
    store = Store(data_dir)
    await store.open()
    try:
        assert store.service_id == service_id
        assert (await store.tasks.get(task_id))["state"] == "queued"
    finally:
        await store.close()


def make_newer_database(path: Path) -> bytes:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE future_things (x)")
    conn.execute("INSERT INTO future_things VALUES ('precious')")
    conn.execute(f"PRAGMA user_version={CURRENT_VERSION + 1}")
    conn.commit()
    conn.close()
    return path.read_bytes()


async def test_a_newer_database_is_refused_and_left_unchanged(data_dir: Path) -> None:
    path = database_path(data_dir)
    original = make_newer_database(path)
    db = Database(path)
    with pytest.raises(DatabaseError) as caught:
        await db.open()
    message = caught.value.message
    assert str(path) in message and "newer" in message
    assert caught.value.code == "database_unusable"
    assert path.read_bytes() == original
    assert not Path(f"{path}-wal").exists()
    assert db._writer is None and db._reader is None  # nothing left open
    assert list(data_dir.iterdir()) == [path]  # no backup, no new file


@pytest.mark.parametrize("size", [100, 4096, 20000])
async def test_a_garbage_file_is_a_clear_error_never_recreated(data_dir: Path, size: int) -> None:
    path = database_path(data_dir)
    garbage = os.urandom(size)
    path.write_bytes(garbage)
    db = Database(path)
    with pytest.raises(DatabaseError) as caught:
        await db.open()
    assert str(path) in caught.value.message
    assert "damaged" in caught.value.message
    assert path.read_bytes() == garbage
    assert db._writer is None and db._reader is None


async def test_damaged_pages_are_a_clear_error(data_dir: Path) -> None:
    store = Store(data_dir)
    await store.open()
    for _ in range(50):
        await create(store.tasks)
    await store.close()
    path = database_path(data_dir)
    data = bytearray(path.read_bytes())
    page = pragma(path, "page_size")
    assert isinstance(page, int) and len(data) > 4 * page
    # Damage only the last page (task data), which opening alone would never read.
    data[len(data) - page :] = os.urandom(page)
    path.write_bytes(bytes(data))
    damaged = path.read_bytes()
    with pytest.raises(DatabaseError) as caught:
        await Store(data_dir).open()
    assert str(path) in caught.value.message
    assert path.read_bytes() == damaged


async def test_a_check_beside_the_first_writes_lets_nothing_commit_on_damage(
    data_dir: Path,
) -> None:
    """Core.open lets the integrity check of a WAL database run beside recovery
    (check_beside): a damaged page is still found before anything is committed, the first
    commit and every later one fail with the clear error, and the file is left as it was."""
    store = Store(data_dir)
    await store.open()
    for _ in range(50):
        await create(store.tasks)
    await store.close()
    path = database_path(data_dir)
    data = bytearray(path.read_bytes())
    page = pragma(path, "page_size")
    assert isinstance(page, int)
    data[len(data) - page :] = os.urandom(page)  # task data, which opening never reads
    path.write_bytes(bytes(data))
    damaged = path.read_bytes()
    store = Store(data_dir)
    await store.open(check_beside=True)
    try:
        for _ in range(2):
            with pytest.raises(DatabaseError) as caught:
                await store.tasks.create(new_task())
            assert (
                str(path) in caught.value.message and "Nothing was changed" in caught.value.message
            )
    finally:
        await store.close()
    assert path.read_bytes() == damaged


async def test_a_check_beside_the_first_writes_lets_them_commit_once_it_passed(
    data_dir: Path,
) -> None:
    store = Store(data_dir)
    await store.open()
    await create(store.tasks)
    await store.close()
    store = Store(data_dir)
    await store.open(check_beside=True)
    try:
        created = [await create(store.tasks) for _ in range(3)]
    finally:
        await store.close()
    store = Store(data_dir)
    await store.open()
    try:
        assert [(await store.tasks.get(i))["state"] for i in created] == ["queued"] * 3
    finally:
        await store.close()


async def a_database_with_one_task(data_dir: Path) -> str:
    """A database of the current schema holding one queued task; the task's id."""
    store = Store(data_dir)
    await store.open()
    task_id = await create(store.tasks)
    await store.close()
    return task_id


def one_more_migration(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """The next open migrates to a schema one past the current, by `script`."""
    monkeypatch.setattr(db_module, "MIGRATIONS", [*MIGRATIONS, script])
    monkeypatch.setattr(db_module, "CURRENT_VERSION", CURRENT_VERSION + 1)


async def test_migration_backs_up_first_and_runs_in_its_own_transaction(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = await a_database_with_one_task(data_dir)
    path = database_path(data_dir)

    v2 = "ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;\n"
    one_more_migration(monkeypatch, v2)
    store = Store(data_dir)
    await store.open()
    try:
        assert await store.db.user_version() == CURRENT_VERSION + 1
        row = await store.db.fetchone("SELECT priority FROM tasks WHERE id=?", (task_id,))
        assert row is not None and row[0] == 0
    finally:
        await store.close()
    backup = path.with_name(f"{path.name}.v{CURRENT_VERSION}.bak")
    assert backup.exists()
    assert pragma(backup, "user_version") == CURRENT_VERSION
    assert stat.S_IMODE(backup.stat().st_mode) & 0o077 == 0


async def test_a_disk_full_during_the_backup_leaves_no_backup_and_the_file_unchanged(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = await a_database_with_one_task(data_dir)
    path = database_path(data_dir)

    def copy_until_full(source: Path, target: Path) -> None:
        Path(target).write_bytes(Path(source).read_bytes()[:4096])  # cut short
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(db_module.shutil, "copy2", copy_until_full)
    one_more_migration(monkeypatch, "CREATE TABLE later (x);\n")
    with pytest.raises(StorageFullError, match="Free some space"):
        await Store(data_dir).open()
    monkeypatch.undo()
    assert sorted(p.name for p in path.parent.iterdir() if ".bak" in p.name) == []
    assert pragma(path, "user_version") == CURRENT_VERSION
    store = Store(data_dir)
    await store.open()
    try:
        assert (await store.tasks.get(task_id))["state"] == "queued"
    finally:
        await store.close()


async def test_a_failing_migration_changes_nothing(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = await a_database_with_one_task(data_dir)

    broken = "CREATE TABLE half_done (x);\nTHIS IS NOT SQL;\n"
    one_more_migration(monkeypatch, broken)
    with pytest.raises(DatabaseError):
        await Store(data_dir).open()
    monkeypatch.undo()
    path = database_path(data_dir)
    assert pragma(path, "user_version") == CURRENT_VERSION
    store = Store(data_dir)
    await store.open()
    try:
        tables = await store.db.fetchall("SELECT name FROM sqlite_master WHERE name='half_done'")
        assert tables == []
        assert (await store.tasks.get(task_id))["state"] == "queued"
    finally:
        await store.close()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_files_are_private(tmp_path: Path) -> None:
    data_dir = tmp_path / "deep" / "data"
    store = Store(data_dir)
    await store.open()
    try:
        await create(store.tasks)
        path = database_path(data_dir)
        assert mode(data_dir) == 0o700
        assert mode(path) == 0o600
        for suffix in ("-wal", "-shm"):
            side = Path(f"{path}{suffix}")
            assert side.exists(), suffix
            assert mode(side) & 0o077 == 0, f"{side} is readable by others"
    finally:
        await store.close()


async def test_existing_loose_permissions_are_tightened(data_dir: Path) -> None:
    os.chmod(data_dir, 0o755)
    path = database_path(data_dir)
    store = Store(data_dir)
    await store.open()
    await store.close()
    os.chmod(path, 0o644)
    store = Store(data_dir)
    await store.open()
    try:
        assert mode(data_dir) == 0o700
        assert mode(path) == 0o600
    finally:
        await store.close()


async def test_the_umask_is_restored_after_opening(data_dir: Path) -> None:
    old = os.umask(0o022)
    try:
        store = Store(data_dir)
        await store.open()
        await store.close()
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(old)


async def test_a_new_databases_identity_is_saved_with_the_first_transaction(
    data_dir: Path,
) -> None:
    """With the check beside the first writes, Store.open commits nothing: the new service
    id is saved by the first transaction (Core's startup one), and kept from then on."""
    store = Store(data_dir)
    await store.open(check_beside=True)
    try:
        service_id = store.service_id
        assert service_id.startswith("svc_")
        assert await store.get_config("service_id") is None  # nothing committed by open
        await recover(store.tasks, first=store.save_identity)
        assert await store.get_config("service_id") == service_id
    finally:
        await store.close()
    again = Store(data_dir)
    await again.open(check_beside=True)
    try:
        assert again.service_id == service_id
    finally:
        await again.close()


async def test_events_move_to_the_appended_log_whole_and_in_order(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Schema 10 (task_events as a rowid table, appended to) on a database of schema 9:
    every event is kept, each task's log still reads in order, a sequence number is still
    never written twice, and recovery appends after the copied events."""
    monkeypatch.setattr(db_module, "MIGRATIONS", MIGRATIONS[:9])
    monkeypatch.setattr(db_module, "CURRENT_VERSION", 9)
    store = Store(data_dir)
    await store.open()
    queued = await create(store.tasks)
    running = await drive(store.tasks, TaskState.RUNNING)
    assert await store.tasks.append_deltas(
        running, ["Bon", "jour"], output_tokens=2, input_tokens=1, snapshot={"tokens": [1, 2]}
    )
    finished = await drive(store.tasks, TaskState.COMPLETED)
    before = {t: await store.tasks.events(t) for t in (queued, running, finished)}
    await store.close()
    monkeypatch.undo()

    store = Store(data_dir)
    with caplog.at_level(logging.INFO, logger=db_module.__name__):
        await store.open()
    try:
        assert await store.db.user_version() == CURRENT_VERSION
        # The log says which schema the file had and which it has now, beside its backup.
        assert f"migrating its schema from version 9 to {CURRENT_VERSION}" in caplog.text
        for task_id, events in before.items():
            assert await store.tasks.events(task_id) == events
        with pytest.raises(sqlite3.IntegrityError):
            await store.db.run(
                lambda conn: conn.execute(
                    "INSERT INTO task_events (task_id, seq, type, created_at, data)"
                    " VALUES (?, 1, 'response.created', 0, '{}')",
                    (queued,),
                )
            )
        report = await recover(store.tasks)  # policy fail: both end failed
        assert {item.task_id for item in report.items} == {queued, running}
        log = await store.tasks.events(running)
        assert log[: len(before[running])] == before[running]
        assert [e["sequence_number"] for e in log] == list(range(1, len(log) + 1))
        assert log[-1]["type"] == "response.failed"
        deltas = "".join(e["delta"] for e in log if e["type"].endswith("output_text.delta"))
        assert log[-1]["response"]["output_text"] == deltas and deltas.endswith("Bonjour")
    finally:
        await store.close()
    assert pragma(database_path(data_dir).with_name("lmsp.db.v9.bak"), "user_version") == 9


async def test_tasks_of_schema_10_gain_an_unknown_first_token_time(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 11 (tasks.first_token_at) on a database of schema 10: its tasks are kept with
    the time unknown (NULL: the window shows its old speed and says so), and a task that
    ends after the upgrade stores the runner's."""
    monkeypatch.setattr(db_module, "MIGRATIONS", MIGRATIONS[:10])
    monkeypatch.setattr(db_module, "CURRENT_VERSION", 10)
    store = Store(data_dir)
    await store.open()
    old = await drive(store.tasks, TaskState.COMPLETED)
    running = await drive(store.tasks, TaskState.RUNNING)
    await store.close()
    monkeypatch.undo()

    store = Store(data_dir)
    await store.open()
    try:
        assert await store.db.user_version() == CURRENT_VERSION == 11
        assert await store.tasks.fail(running, "engine_error", "it broke", first_token_at=1234.5)
        rows = await store.db.fetchall("SELECT id, first_token_at FROM tasks")
        assert {r["id"]: r["first_token_at"] for r in rows} == {old: None, running: 1234.5}
    finally:
        await store.close()
    assert pragma(database_path(data_dir).with_name("lmsp.db.v10.bak"), "user_version") == 10
