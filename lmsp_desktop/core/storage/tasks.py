"""The task state machine of LMSP 11.2, kept in the store.

Every transition is a compare-and-set on the task's current state inside one transaction that
also appends the transition's events and moves the task's last sequence number (rule 11.2).
Listeners hear about each change only after its commit.
"""

from __future__ import annotations

import builtins
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from lmsp_desktop.core.errors import conflict, not_found
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.responses import build_response, message_item, output_text_part
from lmsp_desktop.core.states import (
    CANCELLABLE,
    TERMINAL,
    UNFINISHED,
    RestartPolicy,
    TaskState,
)
from lmsp_desktop.core.storage.db import Database
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim, claim_key
from lmsp_desktop.core.storage.output_items import apply_events, close_events, load_items
from lmsp_desktop.core.tools.parser import Event

log = logging.getLogger(__name__)

JOINED = """
SELECT t.n, t.id, t.client_id, t.model, t.state, t.on_restart, t.mode, t.created_at,
       t.recovered_boot,
       t.started_at, t.finished_at, t.restarts, t.last_seq, t.snapshot,
       r.request, r.output_text, r.item_id, r.input_tokens, r.output_tokens, r.completed_at,
       r.error, r.incomplete_reason, r.output_items
FROM tasks t JOIN responses r ON r.id = t.id
"""

Row = sqlite3.Row
EventFactory = Callable[[Row], list[dict[str, Any]]]


@dataclass(frozen=True)
class TaskChange:
    """What listeners hear after a commit: which task, its state and its last event number."""

    task_id: str
    state: TaskState
    last_seq: int
    model: str
    event_types: tuple[str, ...] = ()
    # The committed events themselves when the commit was text deltas (the streaming hot
    # path), so followers need not read them back; empty otherwise.
    events: tuple[dict[str, Any], ...] = ()


@dataclass
class NewTask:
    """A validated request to create a response and its task."""

    model: str
    request: dict[str, Any]
    on_restart: RestartPolicy = RestartPolicy.FAIL
    mode: str = "background"
    client_id: str | None = None
    id: str = field(default_factory=lambda: new_id("resp"))


@dataclass
class CreateResult:
    """The created task's response object, or a replayed idempotent answer."""

    task_id: str
    status: int
    body: dict[str, Any]
    replayed: bool = False


class TaskStore:
    """Creates tasks, moves them through their states, and reads them back."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.listeners: list[Callable[[TaskChange], None]] = []

    # -- notifications -------------------------------------------------------------------
    def _publish(self, changes: Iterable[TaskChange]) -> None:
        # The change is committed: a broken listener must not make the caller believe the
        # transition failed (it would retry or report an error for work that was saved).
        for change in changes:
            for listener in list(self.listeners):
                try:
                    listener(change)
                except Exception:
                    log.exception("task listener %r failed on %s", listener, change)

    # -- creating ------------------------------------------------------------------------
    async def create(
        self, spec: NewTask, idempotency: IdempotencyClaim | None = None
    ) -> CreateResult:
        """Commit the task and its `response.created` event (and the idempotency key) at once.

        The caller may answer 202 as soon as this returns: the commit has happened.
        """
        now = int(time.time())

        def work(conn: sqlite3.Connection) -> CreateResult:
            if idempotency is not None:
                replay = claim_key(conn, idempotency, spec.id, now)
                if replay is not None:
                    return replay
            conn.execute(
                "INSERT INTO responses (id, created_at, model, request) VALUES (?, ?, ?, ?)",
                (spec.id, now, spec.model, json.dumps(spec.request)),
            )
            conn.execute(
                "INSERT INTO tasks (id, client_id, model, state, on_restart, mode, created_at,"
                " last_seq) VALUES (?, ?, ?, 'queued', ?, ?, ?, 0)",
                (spec.id, spec.client_id, spec.model, str(spec.on_restart), spec.mode, now),
            )
            row = self._row(conn, spec.id)
            body = response_of(row, self._queue_position(conn, row))
            body["task"]["last_sequence_number"] = 1  # the event below is number 1
            self._append(conn, spec.id, 0, [_with_response("response.created", body)])
            if idempotency is not None and spec.mode == "background":
                conn.execute(
                    "UPDATE idempotency_keys SET state='done', status=202, body=? "
                    "WHERE client_id=? AND key=?",
                    (json.dumps(body), idempotency.client_id, idempotency.key),
                )
            return CreateResult(spec.id, 202 if spec.mode == "background" else 200, body)

        result = await self.db.run(work)
        if not result.replayed:
            self._publish(
                [TaskChange(spec.id, TaskState.QUEUED, 1, spec.model, ("response.created",))]
            )
        return result

    # -- transitions ---------------------------------------------------------------------
    async def _transition(
        self,
        task_id: str,
        from_states: Sequence[TaskState],
        to_state: TaskState,
        events: EventFactory,
        *,
        task_sets: str = "",
        response_sets: str = "",
        params: Sequence[Any] = (),
        response_params: Sequence[Any] = (),
    ) -> Row | None:
        """Compare-and-set `from_states → to_state` plus its events, in one transaction.

        Returns the row after the change, or None when the task was not in `from_states`.
        """
        row = await self.db.run(
            lambda conn: self._transition_in(
                conn,
                task_id,
                from_states,
                to_state,
                events,
                task_sets,
                response_sets,
                params,
                response_params,
            )
        )
        if row is not None:
            self._publish([_change_of(row, ())])
        return row

    def _transition_in(
        self,
        conn: sqlite3.Connection,
        task_id: str,
        from_states: Sequence[TaskState],
        to_state: TaskState,
        events: EventFactory,
        task_sets: str = "",
        response_sets: str = "",
        params: Sequence[Any] = (),
        response_params: Sequence[Any] = (),
    ) -> Row | None:
        changed = self._transition_many(
            conn,
            [task_id],
            from_states,
            to_state,
            events,
            task_sets,
            response_sets,
            params,
            response_params,
        )
        return changed[0] if changed else None

    def _transition_many(
        self,
        conn: sqlite3.Connection,
        task_ids: Sequence[str],
        from_states: Sequence[TaskState],
        to_state: TaskState,
        events: EventFactory,
        task_sets: str = "",
        response_sets: str = "",
        params: Sequence[Any] = (),
        response_params: Sequence[Any] = (),
    ) -> builtins.list[Row]:
        """The compare-and-set of every task in `task_ids` still in `from_states`, with the
        events of each: a handful of statements however many tasks (recovery moves 10k)."""
        ids = ",".join("?" for _ in task_ids)
        states = ",".join("?" for _ in from_states)
        changed = [
            r[0]
            for r in conn.execute(
                f"UPDATE tasks SET state=?{task_sets} WHERE id IN ({ids}) AND state IN ({states})"
                " RETURNING id",
                (str(to_state), *params, *task_ids, *map(str, from_states)),
            ).fetchall()
        ]
        if not changed:
            return []
        marks = ",".join("?" for _ in changed)
        if response_sets:
            conn.execute(
                f"UPDATE responses SET {response_sets} WHERE id IN ({marks})",
                (*response_params, *changed),
            )
        rows = [dict(r) for r in conn.execute(JOINED + f" WHERE t.id IN ({marks})", changed)]
        event_rows: builtins.list[tuple[Any, ...]] = []
        now = time.time()
        for row in rows:
            seq = row["last_seq"]
            for event in events(cast(Row, row)):
                seq += 1
                event_rows.append(_event_row(row["id"], seq, event, now))
            row["last_seq"] = seq
        conn.executemany(INSERT_EVENT, event_rows)
        conn.executemany(
            "UPDATE tasks SET last_seq=? WHERE id=?", [(r["last_seq"], r["id"]) for r in rows]
        )
        if to_state in TERMINAL:
            # The stored response (11.1 `responses`) is written with the terminal event.
            conn.executemany(
                "UPDATE responses SET final=? WHERE id=?",
                [(json.dumps(response_of(cast(Row, r))), r["id"]) for r in rows],
            )
        return cast("builtins.list[Row]", rows)

    async def mark_loading(self, task_id: str) -> bool:
        """queued → loading, while the task's model is being loaded."""
        row = await self._transition(
            task_id,
            [TaskState.QUEUED],
            TaskState.LOADING,
            lambda r: [_lmsp_event("response.loading", r)],
        )
        return row is not None

    async def mark_running(self, task_id: str, *, open_message: bool = True) -> str | None:
        """queued/loading → running: opens a new output message item. Returns its item id.

        Without `open_message` (the request offers tools, so the output may be only calls)
        no item is opened yet: append_output opens each item as its first text or call
        comes, and keeps the list in `output_items`. Returns "" then."""
        item_id = new_id("msg") if open_message else None
        opened: list[dict[str, Any]] = []
        if item_id is not None:
            opened = [
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": message_item(item_id, "", "in_progress"),
                },
                {
                    "type": "response.content_part.added",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "part": output_text_part(""),
                },
            ]
        row = await self._transition(
            task_id,
            [TaskState.QUEUED, TaskState.LOADING],
            TaskState.RUNNING,
            lambda r: [
                # The item is announced by the next event; until then the output is empty.
                _with_response(
                    "response.in_progress", {**response_of(r), "output": [], "output_text": ""}
                ),
                *opened,
            ],
            task_sets=", started_at=?, snapshot=NULL",
            params=(time.time(),),
            response_sets="item_id=?, output_text='', output_tokens=0, incomplete_reason=NULL,"
            " output_items=?",
            response_params=(item_id, None if open_message else "[]"),
        )
        if row is None:
            return None
        return item_id or ""

    async def append_output(
        self,
        task_id: str,
        parsed: Sequence[Event],
        *,
        output_tokens: int,
        input_tokens: int,
        snapshot: dict[str, Any] | None,
        closing_status: str = "completed",
    ) -> bool:
        """Persist parsed output (text, function calls) of a task that may call tools, with
        the snapshot that covers it, only while still running (False otherwise, as
        append_deltas). Each item is opened by its first text or call (output_items.py)."""
        snapshot_json = json.dumps(snapshot) if snapshot is not None else None

        def work(conn: sqlite3.Connection) -> tuple[int, str, tuple[str, ...]] | None:
            cursor = conn.execute(
                "UPDATE tasks SET snapshot=? WHERE id=? AND state='running' "
                "RETURNING last_seq, model",
                (snapshot_json, task_id),
            )
            found = cursor.fetchone()
            cursor.close()
            if found is None:
                return None
            current = conn.execute(
                "SELECT item_id, output_items FROM responses WHERE id=?", (task_id,)
            ).fetchone()
            change = apply_events(
                load_items(current[1]) or [],
                current[0],
                parsed,
                closing_status=closing_status,
            )
            last = found[0]
            if change.events:
                last = self._append(conn, task_id, found[0], change.events)
            conn.execute(
                "UPDATE responses SET output_text = output_text || ?, item_id=?,"
                " output_items=?, output_tokens=?, input_tokens=? WHERE id=?",
                (
                    change.text,
                    change.message_id,
                    json.dumps(change.items),
                    output_tokens,
                    input_tokens,
                    task_id,
                ),
            )
            return last, found[1], tuple(e["type"] for e in change.events)

        done = await self.db.run(work)
        if done is None:
            return False
        self._publish([TaskChange(task_id, TaskState.RUNNING, done[0], done[1], done[2])])
        return True

    async def append_deltas(
        self,
        task_id: str,
        deltas: Sequence[str],
        *,
        output_tokens: int,
        input_tokens: int,
        snapshot: dict[str, Any] | None,
    ) -> bool:
        """Persist text deltas with the snapshot that covers them, only while still running.

        Returns False when the task is no longer running (a cancel was committed): the
        caller must stop generating; these deltas were not persisted.
        """
        if not deltas:
            return True
        snapshot_json = json.dumps(snapshot) if snapshot is not None else None

        def work(conn: sqlite3.Connection) -> tuple[int, str, str, int] | None:
            cursor = conn.execute(
                "UPDATE tasks SET snapshot=? WHERE id=? AND state='running' "
                "RETURNING last_seq, model",
                (snapshot_json, task_id),
            )
            found = cursor.fetchone()
            cursor.close()
            if found is None:
                return None
            item_id = conn.execute(
                "SELECT item_id FROM responses WHERE id=?", (task_id,)
            ).fetchone()[0]
            # The hot path (every token): each event's JSON is put together from a shared
            # prefix instead of serialising a dict per delta.
            prefix = (
                '{"type":"response.output_text.delta","item_id":'
                f'{json.dumps(item_id)},"output_index":0,"content_index":0,"delta":'
            )
            now, first = time.time(), found[0] + 1
            rows = [
                (task_id, seq, DELTA, now, f'{prefix}{json.dumps(d)},"sequence_number":{seq}}}')
                for seq, d in enumerate(deltas, first)
            ]
            last = self._write_events(conn, task_id, rows)
            conn.execute(
                "UPDATE responses SET output_text = output_text || ?, output_tokens=?,"
                " input_tokens=? WHERE id=?",
                ("".join(deltas), output_tokens, input_tokens, task_id),
            )
            return last, found[1], item_id, first

        done = await self.db.run(work)
        if done is None:
            return False
        last, model, item_id, first = done
        # The same events as the rows above (what json.loads of them gives), for followers.
        events = tuple(
            {
                "type": DELTA,
                "item_id": item_id,
                "output_index": 0,
                "content_index": 0,
                "delta": d,
                "sequence_number": seq,
            }
            for seq, d in enumerate(deltas, first)
        )
        self._publish([TaskChange(task_id, TaskState.RUNNING, last, model, (DELTA,), events)])
        return True

    async def finish(
        self,
        task_id: str,
        *,
        incomplete_reason: str | None,
        input_tokens: int,
        output_tokens: int,
    ) -> bool:
        """running → completed (or incomplete), closing the item, only if still running."""
        to_state = TaskState.INCOMPLETE if incomplete_reason else TaskState.COMPLETED
        final = "response.incomplete" if incomplete_reason else "response.completed"
        now = time.time()
        row = await self._transition(
            task_id,
            [TaskState.RUNNING],
            to_state,
            lambda r: [*_close_item_events(r), _with_response(final, response_of(r))],
            task_sets=", finished_at=?, snapshot=NULL",
            params=(now,),
            response_sets="completed_at=?, incomplete_reason=?, input_tokens=?, output_tokens=?",
            response_params=(int(now), incomplete_reason, input_tokens, output_tokens),
        )
        return row is not None

    async def fail(self, task_id: str, code: str, message: str) -> bool:
        """queued/loading/running → failed with an error code (engine or load errors)."""
        now = time.time()
        row = await self._transition(
            task_id,
            [TaskState.QUEUED, TaskState.LOADING, TaskState.RUNNING],
            TaskState.FAILED,
            lambda r: [
                *_close_item_events(r),
                _with_response("response.failed", response_of(r)),
            ],
            task_sets=", finished_at=?, snapshot=NULL",
            params=(now,),
            response_sets="error=?",
            response_params=(json.dumps({"code": code, "message": message}),),
        )
        return row is not None

    async def cancel(self, task_id: str, client_id: str | None = None) -> Row:
        """The one cancel transition, for the HTTP route and the GUI alike.

        queued → cancelled at once; loading/running → cancelling (the runner then stops and
        confirms); cancelling/cancelled → unchanged (idempotent); other finished states → 409.
        """
        now = time.time()

        def work(conn: sqlite3.Connection) -> tuple[Row, bool]:
            current = self._row_or_404(conn, task_id, client_id)
            state = TaskState(current["state"])
            if state == TaskState.QUEUED:
                row = self._transition_in(
                    conn,
                    task_id,
                    [TaskState.QUEUED],
                    TaskState.CANCELLED,
                    lambda r: [_lmsp_event("response.cancelled", r)],
                    task_sets=", finished_at=?",
                    params=(now,),
                )
            elif state in (TaskState.LOADING, TaskState.RUNNING):
                row = self._transition_in(
                    conn,
                    task_id,
                    [state],
                    TaskState.CANCELLING,
                    lambda r: [_lmsp_event("response.cancelling", r)],
                )
            elif state in (TaskState.CANCELLING, TaskState.CANCELLED):
                return current, False
            else:
                raise conflict(
                    f"Task {task_id} is already {state} and can no longer be cancelled.",
                    "task_not_cancellable",
                    state=str(state),
                )
            assert row is not None  # the state was read in this same transaction
            return row, True

        row, changed = await self.db.run(work)
        if changed:
            self._publish([_change_of(row, ())])
        return row

    async def confirm_cancelled(self, task_id: str) -> bool:
        """cancelling → cancelled once the engine has stopped; the partial output is kept."""
        now = time.time()
        row = await self._transition(
            task_id,
            [TaskState.CANCELLING],
            TaskState.CANCELLED,
            lambda r: [*_close_item_events(r), _lmsp_event("response.cancelled", r)],
            task_sets=", finished_at=?, snapshot=NULL",
            params=(now,),
        )
        return row is not None

    async def delete(self, task_id: str, client_id: str | None = None) -> None:
        """Delete a finished response with its task and events; 409 while unfinished."""

        def work(conn: sqlite3.Connection) -> None:
            row = self._row_or_404(conn, task_id, client_id)
            if TaskState(row["state"]) in UNFINISHED:
                raise conflict(
                    f"Task {task_id} is still {row['state']}; cancel it first, then delete it.",
                    "task_not_finished",
                    state=row["state"],
                )
            conn.execute("DELETE FROM task_events WHERE task_id=?", (task_id,))
            conn.execute("DELETE FROM tasks WHERE id=?", (task_id,))
            conn.execute("DELETE FROM responses WHERE id=?", (task_id,))

        await self.db.run(work)

    # -- helpers inside a transaction ----------------------------------------------------
    def _append(
        self,
        conn: sqlite3.Connection,
        task_id: str,
        last_seq: int,
        events: builtins.list[dict[str, Any]],
    ) -> int:
        """Append events with the next gapless sequence numbers and move the task's last_seq."""
        now = time.time()
        rows = [_event_row(task_id, last_seq + i, e, now) for i, e in enumerate(events, 1)]
        return self._write_events(conn, task_id, rows)

    def _write_events(
        self, conn: sqlite3.Connection, task_id: str, rows: builtins.list[tuple[Any, ...]]
    ) -> int:
        """The one place a task's numbered, serialised events are written, with last_seq."""
        conn.executemany(INSERT_EVENT, rows)
        seq: int = rows[-1][1]
        conn.execute("UPDATE tasks SET last_seq=? WHERE id=?", (seq, task_id))
        return seq

    @staticmethod
    def _row(conn: sqlite3.Connection, task_id: str) -> Row:
        row = conn.execute(JOINED + " WHERE t.id=?", (task_id,)).fetchone()
        assert row is not None
        return cast(Row, row)

    @staticmethod
    def _row_or_404(conn: sqlite3.Connection, task_id: str, client_id: str | None) -> Row:
        row = conn.execute(JOINED + " WHERE t.id=?", (task_id,)).fetchone()
        if row is None or (client_id is not None and row["client_id"] != client_id):
            raise not_found(f"No response with id {task_id!r}.", "response_not_found")
        return cast(Row, row)

    @staticmethod
    def _queue_position(conn: sqlite3.Connection, row: Row) -> int | None:
        if row["state"] != TaskState.QUEUED:
            return None
        cursor = conn.execute(
            "SELECT COUNT(*) FROM tasks WHERE state='queued' AND model=? AND n<=?",
            (row["model"], row["n"]),
        )
        found = cursor.fetchone()
        return int(found[0]) if found else None

    # -- reading -------------------------------------------------------------------------
    async def get(self, task_id: str, client_id: str | None = None) -> Row:
        """The joined row of a task; 404 for unknown ids and, for non-admins, others' tasks."""
        row = await self.db.fetchone(JOINED + " WHERE t.id=?", (task_id,))
        if row is None or (client_id is not None and row["client_id"] != client_id):
            raise not_found(f"No response with id {task_id!r}.", "response_not_found")
        return row

    async def queue_position(self, row: Row) -> int | None:
        if row["state"] != TaskState.QUEUED:
            return None
        found = await self.db.fetchone(
            "SELECT COUNT(*) FROM tasks WHERE state='queued' AND model=? AND n<=?",
            (row["model"], row["n"]),
        )
        return int(found[0]) if found else None

    async def response_object(self, task_id: str, client_id: str | None = None) -> dict[str, Any]:
        row = await self.get(task_id, client_id)
        return response_of(row, await self.queue_position(row))

    async def events(self, task_id: str, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        rows = await self.db.fetchall(
            "SELECT data FROM task_events WHERE task_id=? AND seq>? ORDER BY seq LIMIT ?",
            (task_id, after, limit),
        )
        return [json.loads(r["data"]) for r in rows]

    async def event_rows(self, task_id: str, after: int = 0, limit: int = 1000) -> list[Row]:
        return await self.db.fetchall(
            "SELECT seq, type, created_at, data FROM task_events WHERE task_id=? AND seq>? "
            "ORDER BY seq LIMIT ?",
            (task_id, after, limit),
        )

    async def list(
        self,
        *,
        states: Sequence[str] = (),
        model: str | None = None,
        client_id: str | None = None,
        after: str | None = None,
        limit: int = 20,
        text: str | None = None,
    ) -> tuple[list[Row], bool]:
        """Tasks newest first, paged by the id of the last task seen. Returns (rows, has_more)."""
        where, params = [], []  # type: ignore[var-annotated]
        if states:
            where.append(f"t.state IN ({','.join('?' for _ in states)})")
            params.extend(states)
        if model:
            where.append("t.model=?")
            params.append(model)
        if client_id:
            where.append("t.client_id=?")
            params.append(client_id)
        if text:
            where.append("(t.id LIKE ? OR t.model LIKE ? OR IFNULL(t.client_id,'') LIKE ?)")
            params.extend([f"%{text}%"] * 3)
        if after:
            anchor = await self.db.fetchone("SELECT n FROM tasks WHERE id=?", (after,))
            if anchor is None:
                raise not_found(
                    f"No task with id {after!r} to page after: pass the id of a listed task.",
                    "task_not_found",
                    param="after",
                )
            where.append("t.n<?")
            params.append(anchor["n"])
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        rows = await self.db.fetchall(
            JOINED + clause + " ORDER BY t.n DESC LIMIT ?", (*params, limit + 1)
        )
        return rows[:limit], len(rows) > limit

    async def unfinished(self, states: Sequence[TaskState]) -> builtins.list[Row]:
        marks = ",".join("?" for _ in states)
        return await self.db.fetchall(
            JOINED + f" WHERE t.state IN ({marks}) ORDER BY t.n", tuple(map(str, states))
        )

    async def counts(self) -> dict[str, int]:
        rows = await self.db.fetchall("SELECT state, COUNT(*) AS c FROM tasks GROUP BY state")
        return {r["state"]: r["c"] for r in rows}


# -- event builders ------------------------------------------------------------------------
DELTA = "response.output_text.delta"
INSERT_EVENT = "INSERT INTO task_events (task_id, seq, type, created_at, data) VALUES (?,?,?,?,?)"


def _event_row(task_id: str, seq: int, event: dict[str, Any], now: float) -> tuple[Any, ...]:
    """An event numbered `seq`; a response it carries says so as its last sequence number."""
    event["sequence_number"] = seq
    task = event.get("response", {}).get("task")
    if task is not None:
        task["last_sequence_number"] = seq
    return (task_id, seq, event["type"], now, json.dumps(event))


def response_of(row: Row, queue_position: int | None = None) -> dict[str, Any]:
    """`build_response` for a joined row (sqlite3.Row reads like a mapping)."""
    return build_response(cast("Mapping[str, Any]", row), queue_position)


def _with_response(event_type: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "response": response}


def _lmsp_event(event_type: str, row: Row) -> dict[str, Any]:
    """LMSP's own events carry the whole response too, so a client can rebuild state."""
    return _with_response(event_type, response_of(row))


def _close_item_events(row: Row) -> list[dict[str, Any]]:
    """The done events of an open output item: text, part, item (Open Responses order)."""
    items = load_items(row["output_items"])
    if items is not None:  # a response that may call tools: its own item list
        return close_events(items, row["output_text"], row["state"] == TaskState.COMPLETED)
    item_id = row["item_id"]
    if not item_id:
        return []
    text = row["output_text"]
    status = "completed" if row["state"] == TaskState.COMPLETED else "incomplete"
    return [
        {
            "type": "response.output_text.done",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {
            "type": "response.content_part.done",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "part": output_text_part(text),
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": message_item(item_id, text, status),
        },
    ]


def _change_of(row: Row, event_types: tuple[str, ...]) -> TaskChange:
    return TaskChange(
        row["id"], TaskState(row["state"]), row["last_seq"], row["model"], event_types
    )


__all__ = [
    "CANCELLABLE",
    "TERMINAL",
    "CreateResult",
    "NewTask",
    "TaskChange",
    "TaskStore",
]
