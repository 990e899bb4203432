"""New tasks made at once, committed together (B1, issue 26 item 1).

The creates made while the writer is busy join one `CreateBatch`, which the writer commits
as one unit of work: each create's idempotency key claimed (or replayed, or refused) in
turn, then the rows of all those that go ahead in one multi-row INSERT per table
(responses, tasks, their `response.created` events; inserts.py) and the keys' 202 answers,
instead of a savepoint and seven statements each. Each create's response object is built on
the loop before it joins (`prepared`); the writer adds the queue position it counts. Each
caller is answered only after the group holding its rows has committed (rule 11.2: its 202
and its event follow the commit).

A create that fails its own checks (a key reused with another body: 422; one still being
answered: 409) fails alone: its rows are never written. A statement that fails for one
create (its id already taken, say) is rolled back with the whole set, and the creates are
then written one by one, each in a savepoint of its own, so that only the failing one
fails, as when every create was a unit of its own.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lmsp_desktop.core.api.resource import build_response, created_response
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.db import settle_waiters
from lmsp_desktop.core.storage.events import created_event_row, to_json
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim, claim_key, mark_answered
from lmsp_desktop.core.storage.inserts import insert_rows
from lmsp_desktop.core.storage.task_reads import queue_length_in
from lmsp_desktop.core.storage.transitions import INSERT_EVENT

if TYPE_CHECKING:
    import sqlite3

    from lmsp_desktop.core.storage.tasks import NewTask

MAX_CREATES = 256  # creates one batch takes at most

INSERT_RESPONSE = "INSERT INTO responses (id, created_at, model, request) VALUES (?, ?, ?, ?)"
# With its `response.created` counted already (last_seq 1): the event goes in beside it.
INSERT_TASK = (
    "INSERT INTO tasks (id, client_id, model, state, on_restart, mode, created_at, last_seq,"
    " kind) VALUES (?, ?, ?, 'queued', ?, ?, ?, 1, ?)"
)

Outcome = tuple[bool, Any]  # (True, CreateResult) or (False, the exception of that create)


@dataclass
class CreateResult:
    """The created task's response object, or a replayed idempotent answer."""

    task_id: str
    status: int
    body: dict[str, Any]
    replayed: bool = False
    body_json: str | None = None  # `body` as JSON text when a new task's commit wrote it


def created_row(spec: NewTask, now: int, request_json: str) -> dict[str, Any]:
    """The joined row (task_reads.JOINED) of a task `create` has just inserted, with its
    `response.created` counted (last_seq 1): the columns it wrote and the table defaults."""
    return {
        "n": None,
        "id": spec.id,
        "client_id": spec.client_id,
        "model": spec.model,
        "state": TaskState.QUEUED,
        "on_restart": str(spec.on_restart),
        "mode": spec.mode,
        "created_at": now,
        "recovered_boot": None,
        "kind": str(spec.kind),
        "started_at": None,
        "finished_at": None,
        "restarts": 0,
        "last_seq": 1,
        "snapshot": None,
        "request": request_json,
        "output_text": "",
        "item_id": None,
        "input_tokens": 0,
        "output_tokens": 0,
        "completed_at": None,
        "error": None,
        "incomplete_reason": None,
        "output_items": None,
        "cached_tokens": 0,
        "stop_sequence": None,
    }


@dataclass(slots=True)
class Create:
    """One create as the loop prepared it: the task, its key, its time, its request JSON and
    its response object, all but the queue position, which the writer counts. Not frozen
    (object.__setattr__ per field, per create: B1); nothing changes it once made."""

    spec: NewTask
    claim: IdempotencyClaim | None
    now: int
    request_json: str
    body: dict[str, Any]


def prepared(spec: NewTask, claim: IdempotencyClaim | None) -> Create:
    """On the loop, before the create joins a batch: what the writer thread would otherwise
    build while the loop waits for it, or fights it for the GIL (B1)."""
    now = int(time.time())
    request_json = to_json(spec.request)
    kind = str(spec.kind)
    if kind == "download":  # its task object shows its progress: the generic path
        body = build_response(created_row(spec, now, request_json), None, spec.request)
    else:
        body = created_response(
            spec.id,
            now,
            spec.model,
            spec.client_id,
            str(spec.on_restart),
            spec.mode,
            kind,
            spec.request,
        )
    return Create(spec, claim, now, request_json, body)


class CreateBatch:
    """The creates waiting for one commit. Filled on the event loop until the writer thread
    takes them (`commit`); a create arriving after that starts the next batch.

    Each create waits on a future of its own, set by `settle` once the batch's commit has
    returned; a caller cancelled meanwhile cancels only its own wait (its task is still
    committed with the batch, as a unit of work's would be)."""

    def __init__(self) -> None:
        self._creates: list[Create] = []
        self._waiters: list[asyncio.Future[CreateResult]] = []
        self._keys: set[tuple[str, str]] = set()
        self._lock = threading.Lock()  # the loop adds, the writer thread takes
        self._taken = False
        self._loop = asyncio.get_running_loop()
        # The writer's commit of this batch (Database.submit); once it is done the batch
        # takes no more creates.
        self.committed: asyncio.Future[list[Outcome]] | None = None

    def add(self, create: Create) -> asyncio.Future[CreateResult] | None:
        """Join this batch: the future of the create's result. None when the batch is
        taken, full, or holds a create with the same key already: that one must be answered
        first (a replay of its 202, or 409 while it is in flight), so the second goes into
        the next batch, which the writer runs after this one."""
        claim = create.claim
        key = (claim.client_id, claim.key) if claim is not None else None
        with self._lock:
            if self._taken or len(self._creates) >= MAX_CREATES or key in self._keys:
                return None
            self._creates.append(create)
            if key is not None:
                self._keys.add(key)
        waiter: asyncio.Future[CreateResult] = self._loop.create_future()
        self._waiters.append(waiter)
        return waiter

    def commit(self, conn: sqlite3.Connection) -> list[Outcome]:
        """In the writer thread (Database.run): every create's outcome, in order."""
        with self._lock:
            self._taken = True
            creates = list(self._creates)
        return commit_creates(conn, creates)

    def settle(self, committed: asyncio.Future[list[Outcome]], path: Path) -> None:
        """On the loop, once the commit has returned: each caller gets its create's result,
        its own error, or the error of the whole group (nothing of it was written)."""
        settle_waiters(enumerate(self._waiters), committed, path)


def commit_creates(conn: sqlite3.Connection, creates: list[Create]) -> list[Outcome]:
    """All the creates' rows at once; when a statement fails, one create at a time, so that
    only the create it failed for fails (see the module's docstring)."""
    try:
        return _in_savepoint(conn, lambda: _write(conn, creates))
    except Exception as exc:
        if not conn.in_transaction:
            raise  # SQLite rolled everything back (disk full, I/O): the group fails
        if len(creates) == 1:
            return [(False, exc)]
    outcomes: list[Outcome] = []
    for create in creates:
        try:
            outcomes += _in_savepoint(conn, functools.partial(_write, conn, [create]))
        except Exception as exc:
            if not conn.in_transaction:
                raise
            outcomes.append((False, exc))
    return outcomes


def _in_savepoint(conn: sqlite3.Connection, write: Callable[[], list[Outcome]]) -> list[Outcome]:
    conn.execute("SAVEPOINT creates")
    try:
        outcomes = write()
    except Exception:
        if conn.in_transaction:
            conn.execute("ROLLBACK TO creates")
            conn.execute("RELEASE creates")
        raise
    conn.execute("RELEASE creates")
    return outcomes


def _write(conn: sqlite3.Connection, creates: list[Create]) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(creates)
    going: list[tuple[int, Create]] = []
    for at, create in enumerate(creates):
        if create.claim is not None:
            try:
                replay = claim_key(conn, create.claim, create.spec.id, create.now)
            except LmspError as exc:  # 422 or 409: this create's own answer
                outcomes[at] = (False, exc)
                continue
            if replay is not None:
                result = CreateResult(replay.task_id, replay.status, replay.body, True)
                outcomes[at] = (True, result)
                continue
        going.append((at, create))
    if not going:
        return [outcome for outcome in outcomes if outcome is not None]
    # Multi-row INSERTs (inserts.py): a step per row would give the GIL back to the busy
    # loop and wait to take it again, row after row.
    insert_rows(
        conn,
        INSERT_RESPONSE,
        [x for _, c in going for x in (c.spec.id, c.now, c.spec.model, c.request_json)],
    )
    # Queue positions: each model's queue as the writer counts it, then one more for each
    # new task of it, in their order (the order of their `n`).
    queued = {model: queue_length_in(conn, model) for model in {c.spec.model for _, c in going}}
    insert_rows(conn, INSERT_TASK, [x for _, c in going for x in _task_row(c.spec, c.now)])
    events: list[Any] = []  # flat, as insert_rows takes them
    answers = []
    for at, create in going:
        spec = create.spec
        queued[spec.model] += 1
        body = create.body
        body["task"]["queue_position"] = queued[spec.model]
        body_json = to_json(body)
        events += created_event_row(spec.id, body_json, time.time())
        background = spec.mode == "background"
        if create.claim is not None and background:  # a retry replays the 202 at once
            answers.append((202, body_json, create.claim.client_id, create.claim.key))
        status = 202 if background else 200
        outcomes[at] = (True, CreateResult(spec.id, status, body, body_json=body_json))
    insert_rows(conn, INSERT_EVENT, events)
    if answers:
        mark_answered(conn, answers)
    return [outcome for outcome in outcomes if outcome is not None]


def _task_row(spec: NewTask, now: int) -> tuple[Any, ...]:
    return (
        spec.id,
        spec.client_id,
        spec.model,
        str(spec.on_restart),
        spec.mode,
        now,
        str(spec.kind),
    )
