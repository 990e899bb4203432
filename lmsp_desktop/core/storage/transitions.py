"""The moves of the task state machine (LMSP 11.2), inside a write transaction.

Every move is a compare-and-set on the tasks' current state that, in the same transaction,
appends each task's events with the next gapless sequence numbers and moves its last
sequence number (rule 11.2). One move is one `Transition` value; `transition_many` applies
it to any number of tasks in a handful of statements (recovery moves 10k at once).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, cast

from lmsp_desktop.core.states import TERMINAL, EventType, TaskState
from lmsp_desktop.core.storage.events import (
    EventFactory,
    Row,
    carrying_response,
    numbered,
)
from lmsp_desktop.core.storage.task_reads import JOINED

INSERT_EVENT = "INSERT INTO task_events (task_id, seq, type, created_at, data) VALUES (?,?,?,?,?)"


@dataclass(frozen=True)
class Expr:
    """A column's new value computed by SQL from its old one (e.g. `restarts+1`)."""

    sql: str


@dataclass(frozen=True)
class Transition:
    """One move: which tasks, from which states, to which state, with which events, and
    what else changes on the task and its response (column → value or `Expr`)."""

    task_ids: tuple[str, ...]
    from_states: tuple[TaskState, ...]
    to_state: TaskState
    events: EventFactory
    task_sets: Mapping[str, Any] = field(default_factory=dict)
    response_sets: Mapping[str, Any] = field(default_factory=dict)


def _assignments(sets: Mapping[str, Any]) -> tuple[list[str], list[Any]]:
    parts: list[str] = []
    params: list[Any] = []
    for column, value in sets.items():  # column names come from code, never from requests
        if isinstance(value, Expr):
            parts.append(f"{column}={value.sql}")
        else:
            parts.append(f"{column}=?")
            params.append(value)
    return parts, params


def marks(values: Sized) -> str:
    return ",".join("?" for _ in range(len(values)))


def transition_many(conn: sqlite3.Connection, move: Transition) -> list[Row]:
    """Apply `move` to every task of it still in `from_states`, with the events of each.
    Returns the rows after the change (tasks no longer in `from_states` are left out)."""
    sets, params = _assignments({"state": str(move.to_state), **move.task_sets})
    changed = [
        r[0]
        for r in conn.execute(
            f"UPDATE tasks SET {', '.join(sets)} WHERE id IN ({marks(move.task_ids)})"
            f" AND state IN ({marks(move.from_states)}) RETURNING id",
            (*params, *move.task_ids, *map(str, move.from_states)),
        ).fetchall()
    ]
    if not changed:
        return []
    if move.response_sets:
        response_sets, response_params = _assignments(move.response_sets)
        conn.execute(
            f"UPDATE responses SET {', '.join(response_sets)} WHERE id IN ({marks(changed)})",
            (*response_params, *changed),
        )
    rows = [dict(r) for r in conn.execute(JOINED + f" WHERE t.id IN ({marks(changed)})", changed)]
    event_rows: list[tuple[Any, ...]] = []
    last_events: list[tuple[str, str]] = []  # each task's last event (JSON), its id
    now = time.time()
    for row in rows:
        seq = row["last_seq"]
        for event in move.events(cast(Row, row)):
            seq += 1
            event_rows.append(numbered(row["id"], seq, event, now))
        row["last_seq"] = seq
        last_events.append((event_rows[-1][4], row["id"]))
    conn.executemany(INSERT_EVENT, event_rows)
    conn.executemany(
        "UPDATE tasks SET last_seq=? WHERE id=?", [(r["last_seq"], r["id"]) for r in rows]
    )
    if move.to_state in TERMINAL:
        # The stored response (11.1 `responses`) is written with the terminal event: the
        # response that event carries (every move to a terminal state ends with one), taken
        # from its JSON by SQLite rather than built and serialised a second time.
        conn.executemany(
            "UPDATE responses SET final=json_extract(?, '$.response') WHERE id=?", last_events
        )
    return cast("list[Row]", rows)


def transition_one(conn: sqlite3.Connection, move: Transition) -> Row | None:
    """`transition_many` of a move of one task: its row after the change, or None."""
    changed = transition_many(conn, move)
    return changed[0] if changed else None


def append_events(
    conn: sqlite3.Connection, task_id: str, last_seq: int, events: Iterable[dict[str, Any]]
) -> int:
    """Append events with the next gapless sequence numbers and move the task's last_seq."""
    now = time.time()
    rows = [numbered(task_id, last_seq + i, e, now) for i, e in enumerate(events, 1)]
    return write_events(conn, task_id, rows)


def write_events(conn: sqlite3.Connection, task_id: str, rows: list[tuple[Any, ...]]) -> int:
    """The one place a task's numbered, serialised events are written, with last_seq."""
    conn.executemany(INSERT_EVENT, rows)
    seq: int = rows[-1][1]
    conn.execute("UPDATE tasks SET last_seq=? WHERE id=?", (seq, task_id))
    return seq


def requeued(task_ids: Sequence[str], from_state: TaskState, **task_sets: Any) -> Transition:
    """Start tasks over (recovery's `retry` cell, and a retry after an upstream cut its
    stream): back to queued with `response.queued`, the output discarded; the next run
    opens a new item with a new id."""
    return Transition(
        tuple(task_ids),
        (from_state,),
        TaskState.QUEUED,
        carrying_response(EventType.QUEUED),
        {
            **task_sets,
            "restarts": Expr("restarts+1"),
            "started_at": None,
            "snapshot": None,
        },
        {"item_id": None, "output_text": "", "output_tokens": 0, "output_items": None},
    )
