"""Single-task moves made at once, committed together (B2, issue 26 item 4).

The runner moves each task it runs through its states one move at a time (running,
completed, cancelled...), and the tasks generating together start and finish together. The
moves made while the writer is busy join one `MoveBatch`, which the writer commits as one
unit of work: the moves of one `shape` (the same states, the same columns) in one read and
three statements for all their tasks (transitions.apply_moves), instead of a savepoint, a
read and three statements each (~150 us a task; a group of 32 finishes took twice a delta
batch's writer time).

Each move is still the compare-and-set it was (a task no longer in its `from_states` is
left alone and its caller learns it), and a move's events are still committed with its
state. When a statement fails for a group of moves, it is rolled back and the group's
moves are applied one by one, each in a savepoint of its own, so that only the failing one
fails, as when every move was a unit of its own.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

from lmsp_desktop.core.storage.db import settle_waiters
from lmsp_desktop.core.storage.events import Row
from lmsp_desktop.core.storage.transitions import Transition, apply_moves, shape

MAX_MOVES = 256  # moves one batch takes at most (its read binds one variable a task)

Outcome = tuple[bool, Any]  # (True, the task's row or None) or (False, the move's exception)


class MoveBatch:
    """The moves waiting for one commit. Filled on the event loop until the writer thread
    takes them (`commit`); a move arriving after that starts the next batch.

    Each move waits on a future of its own, set by `settle` once the batch's commit has
    returned; a caller cancelled meanwhile cancels only its own wait (its move still
    commits with the batch, as a unit of work's would)."""

    def __init__(self) -> None:
        self._moves: dict[str, Transition] = {}
        self._waiters: list[tuple[str, asyncio.Future[Row | None]]] = []
        self._lock = threading.Lock()  # the loop adds, the writer thread takes
        self._taken = False
        self._loop = asyncio.get_running_loop()
        # The writer's commit of this batch (Database.submit); once it is done the batch
        # takes no more moves.
        self.committed: asyncio.Future[dict[str, Outcome]] | None = None

    def add(self, move: Transition) -> asyncio.Future[Row | None] | None:
        """Join this batch: the future of the task's row after the move (None: the task was
        no longer in the move's `from_states`). None when the batch is taken, full, or has
        a move of this task already (a task's moves are committed in their order)."""
        (task_id,) = move.task_ids
        with self._lock:
            if self._taken or len(self._moves) >= MAX_MOVES or task_id in self._moves:
                return None
            self._moves[task_id] = move
        waiter: asyncio.Future[Row | None] = self._loop.create_future()
        self._waiters.append((task_id, waiter))
        return waiter

    def commit(self, conn: sqlite3.Connection) -> dict[str, Outcome]:
        """In the writer thread (Database.run): each task's outcome."""
        with self._lock:
            self._taken = True
            moves = list(self._moves.values())
        return commit_moves(conn, moves)

    def changed(self, committed: asyncio.Future[dict[str, Outcome]]) -> list[Row]:
        """The rows the commit changed, in the order their moves came."""
        if committed.cancelled() or committed.exception() is not None:
            return []
        outcomes = committed.result()
        rows = []
        for task_id, _ in self._waiters:
            ok, row = outcomes[task_id]
            if ok and row is not None:
                rows.append(row)
        return rows

    def settle(self, committed: asyncio.Future[dict[str, Outcome]], path: Path) -> None:
        """On the loop, once the commit has returned (after the listeners heard it): each
        caller gets its task's row, its own move's error, or the whole commit's error."""
        settle_waiters(self._waiters, committed, path)


def commit_moves(conn: sqlite3.Connection, moves: list[Transition]) -> dict[str, Outcome]:
    """Single-task moves, those of one shape together: each task's outcome."""
    groups: dict[tuple[Any, ...], list[Transition]] = {}
    for move in moves:
        groups.setdefault(shape(move), []).append(move)
    outcomes: dict[str, Outcome] = {}
    for group in groups.values():
        outcomes.update(_commit_group(conn, group))
    return outcomes


def _commit_group(conn: sqlite3.Connection, moves: list[Transition]) -> dict[str, Outcome]:
    """Moves of one shape at once; when a statement fails, one at a time (module docstring)."""
    try:
        return _in_savepoint(conn, moves)
    except Exception as exc:
        if not conn.in_transaction:
            raise  # SQLite rolled everything back (disk full, I/O): the group fails
        if len(moves) == 1:
            return {moves[0].task_ids[0]: (False, exc)}
    outcomes: dict[str, Outcome] = {}
    for move in moves:
        try:
            outcomes.update(_in_savepoint(conn, [move]))
        except Exception as exc:
            if not conn.in_transaction:
                raise
            outcomes[move.task_ids[0]] = (False, exc)
    return outcomes


def _in_savepoint(conn: sqlite3.Connection, moves: list[Transition]) -> dict[str, Outcome]:
    conn.execute("SAVEPOINT moves")
    try:
        rows = apply_moves(conn, moves)
    except Exception:
        if conn.in_transaction:
            conn.execute("ROLLBACK TO moves")
            conn.execute("RELEASE moves")
        raise
    conn.execute("RELEASE moves")
    changed = {row["id"]: row for row in rows}
    return {m.task_ids[0]: (True, changed.get(m.task_ids[0])) for m in moves}
