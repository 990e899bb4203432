"""The moves of the task state machine (LMSP 11.2), inside a write transaction.

Every move is a compare-and-set on the tasks' current state that, in the same transaction,
appends each task's events with the next gapless sequence numbers and moves its last
sequence number (rule 11.2). One move is one `Transition` value; `transition_many` applies
it to any number of tasks in four statements (recovery moves 10k at once).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from lmsp_desktop.core.states import TERMINAL, EventType, TaskState
from lmsp_desktop.core.storage.events import (
    EventFactory,
    Row,
    carrying_response,
    numbered,
)
from lmsp_desktop.core.storage.task_reads import JOINED

# The tasks of one move from which its task rows are updated by one statement
# (_update_alike): that statement costs 30-100 us more to run than one UPDATE by id, and
# 2.5 us a task against the UPDATE's 6 (SQLite 3.40, the seeded B4 database).
ALIKE_AT_LEAST = 32
INSERT_EVENT = "INSERT INTO task_events (task_id, seq, type, created_at, data) VALUES (?,?,?,?,?)"

# A task's first output token time, set by a move that ends it (Transition.first_tokens).
FIRST_TOKEN_SET = "first_token_at=coalesce(?, first_token_at), "


@dataclass(frozen=True)
class Added:
    """A column's new value: its old one plus `amount` (e.g. `restarts` + 1)."""

    amount: int


@dataclass(frozen=True)
class Transition:
    """One move: which tasks, from which states, to which state, with which events, and
    what else changes on the task and its response (column → value or `Added`)."""

    task_ids: tuple[str, ...]
    from_states: tuple[TaskState, ...]
    to_state: TaskState
    events: EventFactory
    task_sets: Mapping[str, Any] = field(default_factory=dict)
    response_sets: Mapping[str, Any] = field(default_factory=dict)
    # Task id -> when its run's first output token came (time.time(), the runner's): a move
    # that ends the task stores it in tasks.first_token_at, once per task with the rest of
    # its end, never with each delta (B2's hot path). A task without one (ended by the
    # recovery at a start, or before any token) keeps what it had (NULL).
    first_tokens: Mapping[str, float] = field(default_factory=dict)


# A response column the joined row does not read (an embedding's vectors): never equal to
# its new value, so it is always written.
_UNREAD = object()


def marks(values: Sized) -> str:
    return ",".join("?" for _ in range(len(values)))


def _applied(row: dict[str, Any], sets: Mapping[str, Any]) -> list[Any]:
    """Set `sets` on `row` (a task's joined row) and return the new values in order."""
    values = []
    for column, value in sets.items():
        new = row[column] + value.amount if isinstance(value, Added) else value
        row[column] = new
        values.append(new)
    return values


def transition_many(conn: sqlite3.Connection, move: Transition) -> list[Row]:
    """Apply `move` to every task of it still in `from_states`, with the events of each.
    Returns the rows after the change (tasks no longer in `from_states` are left out)."""
    return apply_moves(conn, [move])


def shape(move: Transition) -> tuple[Any, ...]:
    """What moves must share to be applied together by `apply_moves`: the same states and
    the same columns set (their values and events may differ from task to task)."""
    return (move.from_states, move.to_state, tuple(move.task_sets), tuple(move.response_sets))


def apply_moves(conn: sqlite3.Connection, moves: Sequence[Transition]) -> list[Row]:
    """Apply moves of one `shape`, each to its own tasks (a task in one move only), in one
    read and three statements for all of them: each task gets its own move's values and
    events. Returns the rows after the change (tasks no longer in `from_states` are left
    out).

    The rows are read first and changed in Python, so that each task is written once,
    state and events' last number together, and its response at most once (recovery moves
    10k tasks: each extra statement was ~10% of B4; the runner's starts and finishes of the
    tasks generating at once come as one batch of moves, B2). A response is written only
    when the move changes one of its columns: rewriting a row copies its page into the WAL
    all the same (a queued task requeued by recovery has no output to discard, a cancelled
    one nothing to change; B4). The stored response (11.1 `responses`) is the row itself,
    which `build_response` reads; its terminal event carries the same object."""
    first = moves[0]
    of = {task_id: move for move in moves for task_id in move.task_ids}
    states = tuple(map(str, first.from_states))
    read = conn.cursor()
    read.row_factory = None  # plain tuples, zipped into dicts: half dict(sqlite3.Row)'s time
    read.execute(
        # `+t.state`: found by id, never by the state index (a scan of the whole queue)
        JOINED + f" WHERE t.id IN ({marks(of)}) AND +t.state IN ({marks(states)})",
        (*of, *states),
    )
    columns = [column[0] for column in read.description]
    rows = [dict(zip(columns, values, strict=True)) for values in read]
    if not rows:
        return []
    # A move that keeps the state (recovery's requeue of a queued task, resume of a running
    # one) leaves it unwritten: writing the same value still moves the task's entry in the
    # state index and runs the writer's queue-count triggers (B4: 2,500 of its 10k tasks).
    # The compare-and-set below checks it all the same.
    stays = states == (str(first.to_state),)
    state_set = {} if stays else {"state": str(first.to_state)}
    now = time.time()
    # recovery's cells: never the runner's moves, nor a move with first tokens to store
    alike = len(moves) == 1 and len(rows) >= ALIKE_AT_LEAST and not first.first_tokens
    ends = first.to_state in TERMINAL and any(move.first_tokens for move in moves)
    event_rows: list[tuple[Any, ...]] = []
    task_updates: list[tuple[Any, ...]] = []
    response_updates: list[tuple[Any, ...]] = []
    for row in rows:
        move = of[row["id"]]
        task_values = _applied(row, {**state_set, **move.task_sets})
        if ends:
            task_values.append(move.first_tokens.get(row["id"]))
        response_before = [row.get(column, _UNREAD) for column in move.response_sets]
        response_values = _applied(row, move.response_sets)
        seq = row["last_seq"]
        for event in move.events(cast(Row, row)):
            seq += 1
            event_rows.append(numbered(row["id"], seq, event, now))
        row["last_seq"] = seq
        task_updates.append((*task_values, seq, row["id"], *states))
        if response_values != response_before:  # else its row is left unwritten
            response_updates.append((*response_values, row["id"]))
    # Compare-and-set: the rows were read in this transaction with the same condition.
    if alike:
        updated = _update_alike(conn, {**state_set, **first.task_sets}, rows, states)
    else:
        task_columns = (*state_set, *first.task_sets)
        assignments = "".join(f"{column}=?, " for column in task_columns)
        updated = conn.executemany(
            f"UPDATE tasks SET {assignments}{FIRST_TOKEN_SET if ends else ''}last_seq=?"
            f" WHERE id=? AND state IN ({marks(states)})",
            task_updates,
        ).rowcount
    if updated != len(rows):
        raise RuntimeError(f"{len(rows) - updated} tasks changed state under the write lock")
    conn.executemany(INSERT_EVENT, event_rows)
    if response_updates:
        assignments = ", ".join(f"{column}=?" for column in first.response_sets)
        conn.executemany(f"UPDATE responses SET {assignments} WHERE id=?", response_updates)
    return cast("list[Row]", rows)


def _update_alike(
    conn: sqlite3.Connection,
    sets: Mapping[str, Any],
    rows: list[dict[str, Any]],
    states: tuple[str, ...],
) -> int:
    """The task rows' UPDATE of one move (recovery's cells, 10k tasks each): its values are
    the same for every task (an `Added` the same amount, added by SQL to the value the
    compare-and-set finds, which is the value read), so one statement over the tasks' ids and
    last numbers, passed as one JSON object, instead of a statement per task (B4: 93-98 ms ->
    64-81 ms for 10k tasks). `+tasks.state`: the tasks found by id, never by the state index
    (through it SQLite takes 5 s). Returns how many tasks were still in `states`."""
    assignments, values = [], []
    for column, value in sets.items():
        if isinstance(value, Added):
            assignments.append(f"{column}={column}+?")
            values.append(value.amount)
        else:
            assignments.append(f"{column}=?")
            values.append(value)
    # {id: last number}: json_each's key and value (JSON1's, no newer SQLite than UPDATE FROM)
    seqs = orjson.dumps({row["id"]: row["last_seq"] for row in rows}).decode()
    return conn.execute(
        f"UPDATE tasks SET {''.join(f'{a}, ' for a in assignments)}last_seq=u.value"
        f" FROM json_each(?) AS u WHERE tasks.id=u.key AND +tasks.state IN ({marks(states)})",
        (*values, seqs, *states),
    ).rowcount


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
            "restarts": Added(1),
            "started_at": None,
            "snapshot": None,
        },
        {"item_id": None, "output_text": "", "output_tokens": 0, "output_items": None},
    )


def prompt_length_kept(task_id: str, input_tokens: int) -> Transition:
    """A running generation's prompt length recorded before anything of it is (a stop of
    the service or an engine crash ends its run mid-read: the task object and usage keep
    it whatever its restart policy does next). The state stays; no event."""
    return Transition(
        (task_id,),
        (TaskState.RUNNING,),
        TaskState.RUNNING,
        lambda _row: [],
        response_sets={"input_tokens": input_tokens},
    )
