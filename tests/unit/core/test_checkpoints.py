"""WAL checkpoints as steps of their own (issue 26, B5): no COMMIT copies the WAL back into
the database file (SQLite's automatic checkpoint did, at 1000 frames, and every writer of
that group and behind it waited), yet the WAL never grows without bound."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.storage import db as db_module
from lmsp_desktop.core.storage.store import Store
from tests.support.polling import until

PAGE = 4096


def write_pages(pages: int, key: str) -> Any:
    """A unit of work that writes about `pages` pages (a blob of that size)."""

    def work(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO service_config (key, value) VALUES (?, randomblob(?))",
            (key, pages * PAGE),
        )

    return work


async def test_the_wal_stays_short_over_many_commits(store: Store) -> None:
    limit = db_module.CHECKPOINT_FRAMES
    for i in range(12):  # ~3x the limit in all, in commits of a third of it
        await store.db.run(write_pages(limit // 3, f"probe-{i % 3}"))
        # Checked after each commit: at most what came since the last checkpoint step.
        assert store.db.wal_backlog() < limit + limit // 3 + 16
    wal = Path(f"{store.db.path}-wal").stat().st_size
    assert wal < 3 * limit * (PAGE + 24), f"the WAL grew to {wal} bytes"
    # Writes still work after the checkpoints (a checkpoint statement left in progress on
    # the writer once made the next SAVEPOINT fail with 'SQL statements in progress').
    await store.db.run(write_pages(1, "after"))


async def test_a_commit_does_not_checkpoint_its_callers_answer_comes_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    after_commit: list[int] = []
    original = db_module._run_group

    def run_group(conn: sqlite3.Connection, works: list[Any]) -> list[tuple[bool, Any]]:
        outcomes = original(conn, works)
        after_commit.append(store.db.wal_backlog())
        return outcomes

    monkeypatch.setattr(db_module, "_run_group", run_group)
    # More than SQLite's own automatic checkpoint (1000 frames) in one commit.
    await store.db.run(write_pages(1200, "big"))
    assert after_commit[0] >= 1200, "the COMMIT copied the WAL back itself"
    # The caller was answered first; the checkpoint step follows on its own.
    await until(lambda: store.db.wal_backlog() == 0, what="a checkpoint step after the commit")


async def test_wal_backlog_reads_what_sqlite_counts(store: Store) -> None:
    await store.db.checkpoint()
    assert store.db.wal_backlog() == 0
    await store.db.run(write_pages(50, "probe"))
    waiting = store.db.wal_backlog()
    assert waiting > 50
    writer = store.db._writer
    assert writer is not None
    # The first write after a complete checkpoint starts the WAL over: all of its frames
    # are this commit's, as SQLite's own count says.
    [(busy, frames, copied)] = await writer.execute_fetchall("PRAGMA wal_checkpoint(PASSIVE)")
    assert (busy, frames, copied) == (0, waiting, waiting)
    assert store.db.wal_backlog() == 0
