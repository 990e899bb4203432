"""Retention (LMSP 11.2): finished tasks, their events and stored responses are purged after
a configurable period, in small batches that never hold the write lock for long. Unfinished
tasks are never purged, whatever their age."""

from __future__ import annotations

import asyncio
import sqlite3
import time

from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.core.storage.db import Database

DEFAULT_RETENTION_DAYS = 7.0
EVENTS_PER_BATCH = 2000  # bounds the rows one transaction deletes
TERMINAL_SQL = ",".join(f"'{s}'" for s in sorted(TERMINAL))


async def purge_finished(
    db: Database, retention_days: float, *, now: float | None = None, pause_s: float = 0.0
) -> int:
    """Delete finished tasks older than the retention period. Returns how many were purged."""
    cutoff = (time.time() if now is None else now) - retention_days * 86400
    purged = 0
    while True:
        done_in_batch = await _purge_batch(db, cutoff)
        if done_in_batch < 0:
            return purged
        purged += done_in_batch
        # Let appenders and readers in between batches.
        await asyncio.sleep(pause_s)


async def _purge_batch(db: Database, cutoff: float) -> int:
    """One bounded transaction. Returns tasks fully purged, or -1 when nothing is left."""
    return await db.run(lambda conn: _purge_in(conn, cutoff))


def _purge_in(conn: sqlite3.Connection, cutoff: float) -> int:
    """In the writer thread: statements run back to back, so the lock is held briefly."""
    ids = [
        r[0]
        for r in conn.execute(
            f"SELECT id FROM tasks WHERE state IN ({TERMINAL_SQL}) AND finished_at < ? "
            "ORDER BY finished_at LIMIT 200",
            (cutoff,),
        )
    ]
    if not ids:
        return -1
    budget = EVENTS_PER_BATCH
    purged = 0
    for task_id in ids:
        # Delete from the tail so what stays is still a gapless prefix of the log.
        cursor = conn.execute(
            "DELETE FROM task_events WHERE task_id=? AND seq IN (SELECT seq FROM "
            "task_events WHERE task_id=? ORDER BY seq DESC LIMIT ?)",
            (task_id, task_id, budget),
        )
        budget -= cursor.rowcount
        if budget <= 0:
            left = conn.execute(
                "SELECT 1 FROM task_events WHERE task_id=? LIMIT 1", (task_id,)
            ).fetchone()
            if left is not None:
                break
        conn.execute("DELETE FROM tasks WHERE id=?", (task_id,))
        conn.execute("DELETE FROM responses WHERE id=?", (task_id,))
        purged += 1
        if budget <= 0:
            break
    return purged
