"""The task store: creates tasks and moves them through their states (LMSP 11.2).

Each write is one unit of work for the writer (`Database.run`): a compare-and-set move from
transitions.py with its events from events.py, in one transaction. Listeners hear about each
change only after its commit. Reads are inherited from task_reads.TaskReads.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from lmsp_desktop.core.errors import conflict
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.listeners import notify
from lmsp_desktop.core.states import (
    CANCELLABLE,
    TERMINAL,
    UNFINISHED,
    EventType,
    RestartPolicy,
    TaskKind,
    TaskState,
)
from lmsp_desktop.core.storage.creates import CreateBatch, CreateResult, prepared
from lmsp_desktop.core.storage.creates import Outcome as CreateOutcome
from lmsp_desktop.core.storage.db import Database
from lmsp_desktop.core.storage.deltas import Append, Appended, DeltaBatch, Numbering
from lmsp_desktop.core.storage.events import (
    DELTA,
    DeltaEvents,
    Row,
    carrying_response,
    closing_with,
    in_progress,
    message_opened,
)
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim
from lmsp_desktop.core.storage.moves import MoveBatch, Outcome
from lmsp_desktop.core.storage.output_items import apply_events, load_items
from lmsp_desktop.core.storage.task_reads import TaskReads, row_in
from lmsp_desktop.core.storage.transitions import (
    Transition,
    append_events,
    transition_many,
    transition_one,
)
from lmsp_desktop.core.tools.parser import Event
from lmsp_desktop.core.views import TaskChange

log = logging.getLogger(__name__)


@dataclass
class NewTask:
    """A validated request to create a response and its task."""

    model: str
    request: dict[str, Any]
    on_restart: RestartPolicy = RestartPolicy.FAIL
    mode: str = "background"
    client_id: str | None = None
    id: str = field(default_factory=lambda: new_id("resp"))
    kind: TaskKind = TaskKind.RESPONSE  # run by the runner: a response or an embedding


class TaskStore(TaskReads):
    """Creates tasks, moves them through their states, and reads them back."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.listeners: list[Callable[[TaskChange], None]] = []
        self._deltas: DeltaBatch | None = None  # the appends waiting for the writer (B2)
        self._numbering = Numbering()  # each generating task's next event number, foreseen
        # Each generating task's last append, until its batch's commit has returned: an
        # appender goes on before then (deltas.py), so the task's next write checks it.
        self._unsettled: dict[str, DeltaBatch] = {}
        # The commit error of a task's append answered before a COMMIT that then failed:
        # raised by the task's next append or finish (its log must not go on past it).
        self._lost: dict[str, BaseException] = {}
        self._creates: CreateBatch | None = None  # the creates waiting for the writer (B1)
        self._moves: MoveBatch | None = None  # the single-task moves waiting for it (B2)

    def publish(self, changes: Iterable[TaskChange]) -> None:
        """Tell the listeners about committed changes. A broken listener is logged and the
        others still hear: the change is saved, and the caller must not believe otherwise."""
        for change in changes:
            notify(self.listeners, change)

    # -- creating ------------------------------------------------------------------------
    async def create(
        self, spec: NewTask, idempotency: IdempotencyClaim | None = None
    ) -> CreateResult:
        """Commit the task and its `response.created` event (and the idempotency key) at once.

        The caller may answer 202 as soon as this returns: the commit has happened. The
        creates made meanwhile share one unit of work for the writer (creates.py, B1).
        """
        create = prepared(spec, idempotency)
        self._creates, waiter = joined(self.db, self._creates, create, CreateBatch, self._created)
        result: CreateResult = await waiter
        if not result.replayed:
            created = (EventType.CREATED,)
            self.publish(
                [TaskChange(spec.id, TaskState.QUEUED, 1, spec.model, created, kind=spec.kind)]
            )
        return result

    # -- transitions ---------------------------------------------------------------------
    async def transition(self, move: Transition) -> list[Row]:
        """Apply one move in its own unit of work and tell the listeners. Returns the rows
        after the change (empty when no task of it was in `from_states`).

        A move of one task (the runner's start, finish, cancel confirmation...) joins the
        other such moves waiting for the writer: one unit of work for all of them
        (moves.py, B2)."""
        for task_id in move.task_ids:
            self._numbering.forget(task_id)  # its log goes on with events of the move
        if len(move.task_ids) != 1:
            rows = await self.db.run(lambda conn: transition_many(conn, move))
            self.publish([change_of(row) for row in rows])
            return rows
        if self._moves is not None and self._moves.committed is not self.db.last_waiting():
            # Another unit was submitted after the waiting batch (a cancel, say): a move
            # joining that batch would overtake it, and a cancel made before a finish
            # would lose to it. Such a move starts the next batch, after that unit.
            self._moves = None
        self._moves, waiter = joined(self.db, self._moves, move, MoveBatch, self._moved)
        row: Row | None = await waiter
        return [] if row is None else [row]

    def _created(self, batch: CreateBatch, committed: asyncio.Future[list[CreateOutcome]]) -> None:
        """Once a batch of creates has committed: each caller learns its create's outcome."""
        batch.settle(committed, self.db.path)

    def _moved(self, batch: MoveBatch, committed: asyncio.Future[dict[str, Outcome]]) -> None:
        """Once a batch's commit has returned, in the same loop turn: its changes are
        published in the writer's order, then each caller learns its outcome."""
        try:
            self.publish([change_of(row) for row in batch.changed(committed)])
        finally:
            batch.settle(
                committed, self.db.path
            )  # whatever happened above, no caller waits for ever

    async def mark_loading(self, task_id: str) -> bool:
        """queued → loading, while the task's model is being loaded."""
        move = Transition(
            (task_id,), (TaskState.QUEUED,), TaskState.LOADING, carrying_response(EventType.LOADING)
        )
        return bool(await self.transition(move))

    async def mark_running(self, task_id: str, *, open_message: bool = True) -> str | None:
        """queued/loading → running: opens a new output message item. Returns its item id.

        Without `open_message` (the request offers tools, so the output may be only calls)
        no item is opened yet: append_output opens each item as its first text or call
        comes, and keeps the list in `output_items`. Returns "" then."""
        item_id = new_id("msg") if open_message else None
        opened = message_opened(item_id) if item_id is not None else []
        move = Transition(
            (task_id,),
            (TaskState.QUEUED, TaskState.LOADING),
            TaskState.RUNNING,
            lambda r: [in_progress(r), *opened],
            task_sets={"started_at": time.time(), "snapshot": None},
            response_sets={
                "item_id": item_id,
                "output_text": "",
                "output_tokens": 0,
                "incomplete_reason": None,
                "output_items": None if open_message else "[]",
            },
        )
        if not await self.transition(move):
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
        self._numbering.forget(task_id)

        def work(conn: sqlite3.Connection) -> tuple[int, str, tuple[str, ...]] | None:
            found = _still_running(conn, task_id, snapshot_json)
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
                last = append_events(conn, task_id, found[0], change.events)
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
        self.publish([TaskChange(task_id, TaskState.RUNNING, done[0], done[1], done[2])])
        return True

    async def append_deltas(
        self,
        task_id: str,
        deltas: Sequence[str],
        *,
        output_tokens: int,
        input_tokens: int,
        snapshot: dict[str, Any] | str | None,
        finish: Transition | None = None,
        early: bool = False,
    ) -> bool:
        """Persist text deltas with the snapshot that covers them (a dict, or its JSON text),
        only while still running; with `finish` (`finishing(task_id, ...)`: the generation's
        last deltas, or none) the task's finish in the same transaction.

        Returns False when the task is no longer running (a cancel was committed): the
        caller must stop generating; these deltas were not persisted, nor the finish.
        With `early` (the runner) and no finish it returns once the state check has run,
        while the commit syncs (deltas.py): nothing is published before the commit, and
        should that commit fail, this task's next append or finish raises its error.
        """
        self._raise_lost(task_id)
        if not deltas and finish is None:
            return True
        assert finish is None or (
            finish.task_ids == (task_id,) and finish.from_states == (TaskState.RUNNING,)
        )
        snapshot_json = json.dumps(snapshot) if isinstance(snapshot, dict) else snapshot
        # The rows built here, on the loop, while the writer runs the batch before (deltas.py).
        values, foreseen = self._numbering.rows(task_id, deltas)
        if finish is not None:
            self._numbering.forget(task_id)  # its last deltas: nothing more to foresee
        append = Append(
            task_id,
            deltas,
            "".join(deltas),
            output_tokens,
            input_tokens,
            snapshot_json,
            finish,
            self._unsettled.get(task_id),
            early,
            foreseen,
            values,
        )
        if (
            finish is not None
            and self._deltas is not None
            and self._deltas.committed is not self.db.last_waiting()
        ):
            # As for a move (transition): a finish joining a batch submitted before another
            # unit (a cancel) would overtake it. It starts the next batch, after that unit.
            self._deltas = None
        # The tasks generating at this moment share one batch: three statements for all of
        # them in the writer (deltas.py) instead of three each (B2).
        self._deltas, waiter = joined(
            self.db, self._deltas, append, self._new_deltas, self._committed
        )
        self._unsettled[task_id] = self._deltas
        committed: bool = await waiter
        return committed

    def _new_deltas(self) -> DeltaBatch:
        return DeltaBatch(self._numbering)

    def _committed(self, batch: DeltaBatch, committed: asyncio.Future[dict[str, Appended]]) -> None:
        """Once a batch's commit has returned, in the same loop turn: its tasks' changes are
        published in the writer's order (a cancel committed after these deltas is heard
        after them, never before), then each appender learns its outcome."""
        try:
            if not committed.cancelled() and committed.exception() is None:
                self.publish(_appended_changes(batch, committed.result()))
            else:
                failure = batch.failure()
                for task_id in batch.released:  # answered already: told at their next write
                    if self._unsettled.get(task_id) is batch and failure is not None:
                        self._lost[task_id] = failure
        finally:
            for task_id in batch.task_ids():
                if self._unsettled.get(task_id) is batch:
                    del self._unsettled[task_id]
            # Whatever happened above, no appender may wait for ever.
            batch.settle(committed)

    def _raise_lost(self, task_id: str) -> None:
        """A write of `task_id` after one of its appends was answered and its commit then
        failed: that error, once (the runner fails the task, or resumes it from the snapshot
        the store still has)."""
        lost = self._lost.pop(task_id, None)
        if lost is not None:
            raise lost

    async def _settled(self, task_id: str) -> None:
        """Wait until the commit of the task's last append has returned, then raise its
        error if it failed (`_raise_lost`): a finish must not close a log missing deltas."""
        batch = self._unsettled.get(task_id)
        if batch is not None and batch.committed is not None:
            await asyncio.wait([batch.committed])
        self._raise_lost(task_id)

    async def finish(
        self,
        task_id: str,
        *,
        incomplete_reason: str | None,
        input_tokens: int,
        output_tokens: int,
        cached_tokens: int = 0,
        stop_sequence: str | None = None,
        first_token_at: float | None = None,
    ) -> bool:
        """running → completed (or incomplete), closing the item, only if still running
        (`finishing`). A generation's finish usually comes with its last deltas instead
        (append_deltas' `finish`)."""
        await self._settled(task_id)
        move = finishing(
            task_id,
            incomplete_reason=incomplete_reason,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached_tokens,
            stop_sequence=stop_sequence,
            first_token_at=first_token_at,
        )
        return bool(await self.transition(move))

    async def fail(
        self,
        task_id: str,
        code: str,
        message: str,
        *,
        input_tokens: int | None = None,
        first_token_at: float | None = None,
    ) -> bool:
        """queued/loading/running → failed with an error code (engine or load errors).
        `input_tokens`: the prompt's length, stored with the end (a generation that ends
        before its output: only output commits store it); `first_token_at`: when its run's
        first output token came (the runner's), stored with the end."""
        self._lost.pop(task_id, None)  # the task ends: a lost append no longer matters
        error = json.dumps({"code": code, "message": message})
        move = Transition(
            (task_id,),
            (TaskState.QUEUED, TaskState.LOADING, TaskState.RUNNING),
            TaskState.FAILED,
            closing_with(EventType.FAILED),
            task_sets={"finished_at": time.time(), "snapshot": None},
            response_sets={**_prompt_length(input_tokens), "error": error},
            first_tokens=_first_token(task_id, first_token_at),
        )
        return bool(await self.transition(move))

    async def cancel(self, task_id: str, client_id: str | None = None) -> Row:
        """The one cancel transition, for the HTTP route and the GUI alike.

        queued → cancelled at once; loading/running → cancelling (the runner then stops and
        confirms); cancelling/cancelled → unchanged (idempotent); other finished states → 409.
        """
        self._numbering.forget(task_id)
        now = time.time()

        def work(conn: sqlite3.Connection) -> tuple[Row, bool]:
            current = row_in(conn, task_id, client_id)
            state = TaskState(current["state"])
            if state == TaskState.QUEUED:
                move = Transition(
                    (task_id,),
                    (TaskState.QUEUED,),
                    TaskState.CANCELLED,
                    carrying_response(EventType.CANCELLED),
                    task_sets={"finished_at": now},
                )
            elif state in (TaskState.LOADING, TaskState.RUNNING):
                move = Transition(
                    (task_id,),
                    (state,),
                    TaskState.CANCELLING,
                    carrying_response(EventType.CANCELLING),
                )
            elif state in (TaskState.CANCELLING, TaskState.CANCELLED):
                return current, False
            else:
                raise conflict(
                    f"Task {task_id} is already {state} and can no longer be cancelled.",
                    "task_not_cancellable",
                    state=str(state),
                )
            row = transition_one(conn, move)
            assert row is not None  # the state was read in this same transaction
            return row, True

        row, changed = await self.db.run(work)
        if changed:
            self.publish([change_of(row)])
        return row

    async def confirm_cancelled(
        self,
        task_id: str,
        *,
        input_tokens: int | None = None,
        first_token_at: float | None = None,
    ) -> bool:
        """cancelling → cancelled once the engine has stopped; the partial output is kept.
        `input_tokens` and `first_token_at` stored with the end, as by fail()."""
        self._lost.pop(task_id, None)  # as in fail()
        move = Transition(
            (task_id,),
            (TaskState.CANCELLING,),
            TaskState.CANCELLED,
            closing_with(EventType.CANCELLED),
            task_sets={"finished_at": time.time(), "snapshot": None},
            response_sets=_prompt_length(input_tokens),
            first_tokens=_first_token(task_id, first_token_at),
        )
        return bool(await self.transition(move))

    async def delete(self, task_id: str, client_id: str | None = None) -> None:
        """Delete a finished response with its task and events; 409 while unfinished."""

        def work(conn: sqlite3.Connection) -> None:
            row = row_in(conn, task_id, client_id)
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


class _Batch(Protocol):
    """What joined() needs of a batch (DeltaBatch, CreateBatch)."""

    committed: asyncio.Future[Any] | None

    def add(self, item: Any) -> asyncio.Future[Any] | None: ...

    def commit(self, conn: sqlite3.Connection) -> Any: ...


B = TypeVar("B", bound=_Batch)


def joined(
    db: Database,
    batch: B | None,
    item: Any,
    new: Callable[[], B],
    settle: Callable[[B, asyncio.Future[Any]], None],
) -> tuple[B, asyncio.Future[Any]]:
    """`item` joins the batch waiting for the writer, or a new one submitted for it: the
    batch now waiting, and the future of the item's outcome. `settle(batch, committed)`
    runs once the batch's commit has returned."""
    # A batch whose commit has ended (even one failed before its work ran) takes no more.
    waiter = None
    if batch is not None and batch.committed is not None and not batch.committed.done():
        waiter = batch.add(item)
    if batch is None or waiter is None:
        batch = new()
        waiter = batch.add(item)
        assert waiter is not None
        batch.committed = db.submit(batch.commit)
        batch.committed.add_done_callback(functools.partial(settle, batch))
    return batch, waiter


def finishing(
    task_id: str,
    *,
    incomplete_reason: str | None,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    stop_sequence: str | None = None,
    first_token_at: float | None = None,
) -> Transition:
    """The move running → completed (or incomplete) that closes the item.
    `cached_tokens`: of the input tokens, those the prefix cache held (usage shows it);
    `stop_sequence`: the request's stop sequence that ended the output, if one did;
    `first_token_at`: when the run's first output token came (the runner's), stored."""
    to_state = TaskState.INCOMPLETE if incomplete_reason else TaskState.COMPLETED
    final = EventType.INCOMPLETE if incomplete_reason else EventType.COMPLETED
    now = time.time()
    return Transition(
        (task_id,),
        (TaskState.RUNNING,),
        to_state,
        closing_with(final),
        task_sets={"finished_at": now, "snapshot": None},
        response_sets={
            "completed_at": int(now),
            "incomplete_reason": incomplete_reason,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cached_tokens": cached_tokens,
            "stop_sequence": stop_sequence,
        },
        first_tokens=_first_token(task_id, first_token_at),
    )


def _first_token(task_id: str, first_token_at: float | None) -> dict[str, float]:
    """A move's `first_tokens` for one task (none when its first token is not known)."""
    return {} if first_token_at is None else {task_id: first_token_at}


def _prompt_length(input_tokens: int | None) -> dict[str, int]:
    """The response columns of an end that stores the prompt's length, when given."""
    return {} if input_tokens is None else {"input_tokens": input_tokens}


def _appended_changes(batch: DeltaBatch, appended: dict[str, Appended]) -> Iterator[TaskChange]:
    """What a committed delta batch changed, task by task: the deltas, then the finish that
    came with them."""
    for task_id, done in appended.items():
        deltas = batch.deltas_of(task_id)
        if deltas:
            yield TaskChange(
                task_id,
                TaskState.RUNNING,
                done.last_seq,
                done.model,
                (DELTA,),
                # The committed events themselves (what json.loads of the rows gives).
                DeltaEvents(done.item_id, deltas, done.first_seq),
            )
        if done.finished is not None and not isinstance(done.finished, Exception):
            yield change_of(done.finished)


def _still_running(
    conn: sqlite3.Connection, task_id: str, snapshot_json: str | None
) -> tuple[int, str] | None:
    """Store the snapshot of a running task; its (last_seq, model), or None when it is no
    longer running (a cancel was committed: the caller must stop)."""
    cursor = conn.execute(
        "UPDATE tasks SET snapshot=? WHERE id=? AND state='running' RETURNING last_seq, model",
        (snapshot_json, task_id),
    )
    found = cursor.fetchone()
    cursor.close()
    return None if found is None else (int(found[0]), str(found[1]))


def change_of(row: Row, event_types: tuple[str, ...] = ()) -> TaskChange:
    return TaskChange(
        row["id"],
        TaskState(row["state"]),
        row["last_seq"],
        row["model"],
        event_types,
        kind=row["kind"],
    )


__all__ = [
    "CANCELLABLE",
    "TERMINAL",
    "CreateResult",
    "NewTask",
    "Row",
    "TaskChange",
    "TaskStore",
]
