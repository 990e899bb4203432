"""Retention (LMSP 11.2): finished tasks, their events and stored responses are purged after
a configurable period. Unfinished tasks are never purged, whatever their age.

The purge shares the one writer with every running stream, so it must never hold the write
lock for long: each transaction is a run of small steps that stops once it has worked for
BATCH_WORK_S, whatever the size of the rows, the disk or the machine's load. A step is a
range of the `tasks_expiry` index (finished tasks, oldest first) and the key ranges of their
events and responses.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Callable

from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.core.storage.db import Database

DEFAULT_RETENTION_DAYS = 7.0
BATCH_WORK_S = 0.020  # one transaction stops stepping after this long (plus its commit)
# Bound one step (the time check comes between steps) as the raw peer's statements do (B5:
# 200 tasks of 10 events). At 500 events (50 such tasks) a step's SELECT and three DELETEs
# ran four times as often, reading twice the rows they used: the purge took 10-19% more CPU
# than the raw loop, against 0-7% at this size (load 6-7, where a step took 6-9 ms).
EVENTS_PER_STEP = 2000
TASKS_PER_STEP = 200
# The list of schema.py's tasks_expiry index, spelled the same: SQLite uses a partial index
# only for a query whose WHERE names its condition.
TERMINAL_SQL = ",".join(f"'{s}'" for s in sorted(TERMINAL))


async def purge_finished(
    db: Database,
    retention_days: float,
    *,
    now: float | None = None,
    pause_s: float = 0.0,
    batch_s: float = BATCH_WORK_S,
) -> int:
    """Delete finished tasks older than the retention period. Returns how many were purged."""
    cutoff = (time.time() if now is None else now) - retention_days * 86400
    batch = functools.partial(_purge_in, cutoff=cutoff, budget_s=batch_s)
    purged = 0
    while True:
        done_in_batch, more = await db.run(batch, large=True)  # no savepoint copying it
        purged += done_in_batch
        if not more:
            return purged
        # Let appenders and readers in between batches.
        await asyncio.sleep(pause_s)


def _purge_in(
    conn: sqlite3.Connection,
    *,
    cutoff: float,
    budget_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[int, bool]:
    """In the writer thread, one transaction: steps while the next one, if it takes as long
    as the last, still ends within `budget_s` (stopping only once past it would overrun the
    budget by a whole step, and the write lock with it). Returns the tasks fully purged and
    whether expired tasks are left. The first step always runs, so every batch makes
    progress."""
    last = clock()
    deadline = last + budget_s
    purged = 0
    while True:
        done = _step(conn, cutoff)
        if done < 0:
            return purged, False
        purged += done
        now = clock()
        if now + (now - last) > deadline:
            return purged, True
        last = now


def _step(conn: sqlite3.Connection, cutoff: float) -> int:
    """Whole tasks in set-based deletes while their events fit the step (last_seq bounds what
    is left of a log); a task too large for one step is cut from the tail over several.
    Returns the tasks fully purged, or -1 when none is left to purge."""
    expired = conn.execute(
        "SELECT id, last_seq FROM tasks INDEXED BY tasks_expiry "
        f"WHERE state IN ({TERMINAL_SQL}) AND finished_at < ? ORDER BY finished_at LIMIT ?",
        (cutoff, TASKS_PER_STEP),
    ).fetchall()
    if not expired:
        return -1
    whole, budget = [], EVENTS_PER_STEP
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
        (task_id, task_id, EVENTS_PER_STEP),
    )
    if conn.execute("SELECT 1 FROM task_events WHERE task_id=? LIMIT 1", (task_id,)).fetchone():
        return 0
    conn.execute("DELETE FROM tasks WHERE id=?", (task_id,))
    conn.execute("DELETE FROM responses WHERE id=?", (task_id,))
    return 1
