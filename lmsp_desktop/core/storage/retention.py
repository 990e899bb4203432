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
    """In the writer thread. Whole tasks go in set-based deletes while their events fit the
    budget (last_seq bounds what is left of a log); a task too large for one batch is cut
    from the tail over several batches."""
    expired = conn.execute(
        f"SELECT id, last_seq FROM tasks WHERE state IN ({TERMINAL_SQL}) AND finished_at < ? "
        "ORDER BY finished_at LIMIT 200",
        (cutoff,),
    ).fetchall()
    if not expired:
        return -1
    whole, budget = [], EVENTS_PER_BATCH
    for task_id, last_seq in expired:
        if last_seq > budget:
            break
        whole.append(task_id)
        budget -= last_seq
    if not whole:
        return _purge_large(conn, expired[0][0])
    marks = ",".join("?" for _ in whole)
    conn.execute(f"DELETE FROM task_events WHERE task_id IN ({marks})", whole)
    conn.execute(f"DELETE FROM tasks WHERE id IN ({marks})", whole)
    conn.execute(f"DELETE FROM responses WHERE id IN ({marks})", whole)
    return len(whole)


def _purge_large(conn: sqlite3.Connection, task_id: str) -> int:
    # Delete from the tail so what stays is still a gapless prefix of the log.
    conn.execute(
        "DELETE FROM task_events WHERE task_id=? AND seq IN (SELECT seq FROM "
        "task_events WHERE task_id=? ORDER BY seq DESC LIMIT ?)",
        (task_id, task_id, EVENTS_PER_BATCH),
    )
    if conn.execute("SELECT 1 FROM task_events WHERE task_id=? LIMIT 1", (task_id,)).fetchone():
        return 0
    conn.execute("DELETE FROM tasks WHERE id=?", (task_id,))
    conn.execute("DELETE FROM responses WHERE id=?", (task_id,))
    return 1
