"""Text deltas of the tasks generating at once, committed together (B2, rule 11.2).

Each running task hands over its new tokens' text as one `Append`. The appends made while
the writer is busy join one `DeltaBatch`, which the writer commits as one unit of work in
a few set-based statements, whatever the number of tasks in it (`commit_appends`): the
compare-and-set on `running` that stores each task's snapshot and moves its `last_seq` past
its deltas (checking the numbers the loop foresaw; a read-back only when they were not all
right), the texts appended, and all the events inserted. What a task's append returns is
what its own statements gave: a task no longer running commits nothing, and the others are
not affected.

A task's last append may carry its finish (the completion move, TaskStore.finishing): the
writer applies it right after the deltas, in the same transaction (transitions.apply_moves,
the finishes of a batch together), so a generation's end costs no commit of its own and a
cancel either lands before the last deltas (nothing of them is written, the finish neither)
or after the completion (it is refused).

An appender that asks for it (the runner's, `early`) and carries no finish learns its
outcome as soon as the batch's statements have run, before the COMMIT (its fsync) returns:
the state check has answered by then, and the appender prepares its next tokens while the
disk syncs (B2: 32 tasks' hand-overs overlap the
fsync instead of waiting for it). Nothing is published before the commit (rule 11.2: the
listeners, and through them every stream, hear of the deltas only once they are durable).
Should that COMMIT fail, the task's next append or finish raises its error
(TaskStore.append_deltas), and an append already queued behind it is refused in the writer
(`Append.after`), so the log never goes on past deltas that were not written.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

import orjson

from lmsp_desktop.core.storage.events import Row, numbered_deltas
from lmsp_desktop.core.storage.inserts import insert_rows
from lmsp_desktop.core.storage.moves import commit_moves
from lmsp_desktop.core.storage.transitions import INSERT_EVENT, Transition

MAX_TASKS = 256  # appends one batch takes at most (4 SQL variables each)


class Append(NamedTuple):
    """One task's new text: its deltas, the usage so far and the snapshot covering them (a
    tuple: one is made for every running task at every commit)."""

    task_id: str
    deltas: Sequence[str]
    text: str  # the deltas joined
    output_tokens: int
    input_tokens: int
    snapshot_json: str | None
    finish: Transition | None = None  # the task's finish, committed with these deltas
    # The batch of the task's previous append while that batch's commit was still going on:
    # should it have failed, these deltas must not be written after the missing ones.
    after: DeltaBatch | None = None
    early: bool = False  # answered before the commit returns (module docstring)
    # What the loop foresees the append gives (`Numbering`), and the events' rows built
    # there for it, flat as the INSERT binds them (five values a row): used when the writer
    # finds the task's log there, else built again there.
    foreseen: Appended | None = None
    values: list[Any] | None = None


class Appended(NamedTuple):
    """A committed append: the task's last sequence number, its model, its message item and
    the number of its first delta event."""

    last_seq: int
    model: str
    item_id: str | None
    first_seq: int
    # The task's row after its finish, when the append carried one (None otherwise), or
    # the finish's own error (its deltas are committed all the same).
    finished: Row | Exception | None = None


class DeltaBatch:
    """The appends waiting for one commit. Filled on the event loop until the writer thread
    takes them (`commit`); an append arriving after that starts the next batch.

    Each append waits on a future of its own, which `settle` sets once the batch's commit
    has returned: no task and no shield per batch, and an appender cancelled meanwhile
    cancels only its own wait (its deltas still commit with the batch, as before)."""

    def __init__(self, numbering: Numbering) -> None:
        self._numbering = numbering
        self._appends: dict[str, Append] = {}
        # Each task's previous batch while its commit was going on (Append.after), until the
        # writer has checked it (then let go: a chain of them would keep every batch of a
        # long generation, snapshots and all, alive).
        self._after: dict[str, DeltaBatch] = {}
        self._waiters: list[tuple[str, asyncio.Future[bool]]] = []
        # Appends refused in the writer because the batch of the task's previous one failed.
        self._lost: dict[str, BaseException] = {}
        # Tasks whose appenders were answered before the commit returned (`_release`).
        self.released: list[str] = []
        self._lock = threading.Lock()  # the loop adds, the writer thread takes
        self._taken = False
        self._early = False  # an `early` append without a finish has joined
        self._learned = False  # the numbering has heard this batch's outcome (`_learn`)
        self._loop = asyncio.get_running_loop()
        # The writer's commit of this batch (Database.submit); once it is done the batch
        # takes no more appends.
        self.committed: asyncio.Future[dict[str, Appended]] | None = None

    def add(self, append: Append) -> asyncio.Future[bool] | None:
        """Join this batch: the future of whether the append committed (False: the task was
        no longer running). None when the batch is taken, full, or has this task already (a
        task's appends are committed in their order, one per batch)."""
        with self._lock:
            if self._taken or len(self._appends) >= MAX_TASKS or append.task_id in self._appends:
                return None
            if append.after is not None:
                self._after[append.task_id] = append.after
                append = append._replace(after=None)
            self._appends[append.task_id] = append
            self._early = self._early or (append.early and append.finish is None)
        waiter: asyncio.Future[bool] = self._loop.create_future()
        self._waiters.append((append.task_id, waiter))
        return waiter

    def task_ids(self) -> list[str]:
        return [task_id for task_id, _ in self._waiters]

    def deltas_of(self, task_id: str) -> Sequence[str]:
        return self._appends[task_id].deltas

    def commit(self, conn: sqlite3.Connection) -> dict[str, Appended]:
        """In the writer thread (Database.run): the batch's statements. Returns the appends
        committed, by task; a task missing was no longer running."""
        with self._lock:
            self._taken = True
            appends = list(self._appends.values())
            after, self._after = self._after, {}
        # Most tasks of a batch come from the same one before: each previous batch once.
        failures = {previous: previous.failure() for previous in set(after.values())}
        for task_id, previous in after.items():
            failure = failures[previous]
            if failure is not None:
                self._lost[task_id] = failure
        kept = [a for a in appends if a.task_id not in self._lost] if self._lost else appends
        done = commit_appends(conn, kept) if kept else {}  # all refused: no statement to run
        if self._early:
            # Before the COMMIT: the appenders go on while it syncs (module docstring).
            self._loop.call_soon_threadsafe(self._release, done)
        return done

    def failure(self) -> BaseException | None:
        """The error of this batch's commit once it has failed (None while it runs or once it
        has committed). Read in the writer thread, for the batch after it: the writer goes on
        from a group to the next only once the group has committed, and after a failure the
        loop settles it before the writer takes a later unit (Database._write_groups): not
        done there means committed."""
        committed = self.committed
        if committed is None or not committed.done():
            return None
        if committed.cancelled():
            return asyncio.CancelledError("the commit of the previous deltas was cancelled")
        return committed.exception()

    def _release(self, done: dict[str, Appended]) -> None:
        """On the loop, while the writer commits: each `early` appender without a finish
        learns whether its task was still running (the others wait for the commit: `settle`)."""
        self._learn(done)
        for task_id, waiter in self._waiters:
            append = self._appends[task_id]
            if waiter.done() or not append.early or append.finish is not None:
                continue
            lost = self._lost.get(task_id)
            if lost is not None:
                waiter.set_exception(lost)
            else:
                waiter.set_result(task_id in done)
                if task_id in done:  # told its deltas are written: told again if they are not
                    self.released.append(task_id)

    def _learn(self, done: dict[str, Appended]) -> None:
        """Once per batch, as soon as its outcome is known (released early, or settled):
        a second time would take the numbering back behind the appends made meanwhile."""
        if not self._learned:
            self._learned = True
            self._numbering.learn(self._appends, done)

    def settle(self, committed: asyncio.Future[dict[str, Appended]]) -> None:
        """On the loop, once the commit has returned (after the listeners heard it): each
        appender learns whether its append committed, or the commit's error."""
        if committed.cancelled():
            for _, waiter in self._waiters:
                waiter.cancel()
            return
        error = committed.exception()
        done = {} if error is not None else committed.result()
        self._learn(done)
        for task_id, waiter in self._waiters:
            if waiter.done():
                continue  # released before the commit, or its appender was cancelled
            finished = done[task_id].finished if task_id in done else None
            failure = error if error is not None else self._lost.get(task_id)
            if failure is not None:
                waiter.set_exception(failure)
            elif isinstance(finished, Exception):
                waiter.set_exception(finished)
            else:
                waiter.set_result(task_id in done)


def commit_appends(conn: sqlite3.Connection, appends: list[Append]) -> dict[str, Appended]:
    """The batch's statements, in as few SQLite steps and as little Python as they can be:
    the writer thread is what B2's rate waits on, and every step lets go of the GIL and
    takes it back from the loop.

    The tasks whose numbers the loop foresaw (`Numbering`) are moved in one UPDATE that also
    checks each one's last number: when it moved them all (its row count), everything the
    appends need is known, and their rows, built on the loop, go in as they are. Otherwise
    (a task's first append, a task no longer running, or a number foreseen wrong) the tasks
    it left are moved by a second UPDATE and one SELECT reads back, as one JSON value, what
    both gave; their rows are numbered from the log. The events go in as multi-row INSERTs
    (`insert_rows`; an `executemany` steps once a row)."""
    foreseen = [a for a in appends if a.foreseen is not None]
    moved_at_once = 0
    if foreseen:
        moved_at_once = conn.execute(
            _MOVE_FORESEEN.format(rows=_rows(len(foreseen), 4)),
            list(chain.from_iterable(map(_foreseen_move, foreseen))),
        ).rowcount
    done: dict[str, Appended] = {}
    values: list[Any] = []
    if moved_at_once == len(appends):  # each one foreseen, and foreseen right
        kept = appends
        done = {a.task_id: a.foreseen for a in foreseen if a.foreseen is not None}
        values = list(chain.from_iterable(map(_values, kept)))
    else:
        moved = _move_the_others(conn, appends)
        if not moved:
            return {}
        kept = [a for a in appends if a.task_id in moved]
        now = time.time()
        for a in kept:
            last, model, item_id = moved[a.task_id]
            appended = Appended(last, model, item_id, last - len(a.deltas) + 1)
            if a.values is not None and a.foreseen == appended:
                values += a.values
            else:  # not foreseen, or foreseen wrong: numbered from the log itself
                rows = numbered_deltas(a.task_id, item_id, a.deltas, appended.first_seq, now)
                values += chain.from_iterable(rows)
            done[a.task_id] = appended
    conn.execute(
        "UPDATE responses SET output_text=output_text || v.column2, output_tokens=v.column3,"
        f" input_tokens=v.column4 FROM (VALUES {_rows(len(kept), 4)}) AS v"
        " WHERE responses.id=v.column1",
        list(chain.from_iterable(map(_text_update, kept))),
    )
    insert_rows(conn, INSERT_EVENT, values)
    finishes = [a.finish for a in kept if a.finish is not None]
    if finishes:
        # Read after the deltas' statements: the closing events carry the whole text, and
        # are numbered after the last delta. Still running: the deltas' update said so.
        for task_id, (_, row_or_error) in commit_moves(conn, finishes).items():
            if row_or_error is None:  # never: it was running a statement ago (not a loop)
                row_or_error = RuntimeError(f"the finish of {task_id} found it not running")
            done[task_id] = done[task_id]._replace(finished=row_or_error)
    return done


# Each foreseen task moved to its last number foreseen (column3) if it still runs and its
# log ends just before the first one (column4). The statements' values are taken from the
# appends by attrgetters: in C, as the writer's Python is on B2's critical path.
_MOVE_FORESEEN = (
    "UPDATE tasks SET snapshot=v.column2, last_seq=v.column3 FROM (VALUES {rows}) AS v"
    " WHERE tasks.id=v.column1 AND tasks.state='running' AND tasks.last_seq=v.column4-1"
)
_foreseen_move = attrgetter("task_id", "snapshot_json", "foreseen.last_seq", "foreseen.first_seq")
_text_update = attrgetter("task_id", "text", "output_tokens", "input_tokens")
_values = attrgetter("values")


def _move_the_others(
    conn: sqlite3.Connection, appends: list[Append]
) -> dict[str, tuple[int, str, str | None]]:
    """The running tasks `_MOVE_FORESEEN` left (not foreseen, or foreseen wrong), moved past
    their deltas; then every running task of the batch's last number, model and message
    item. A task that statement moved is told from one it left by its log: rule 11.2 keeps
    `last_seq` the number of a task's last event, so a task whose log has an event at its
    `last_seq` was not moved yet (a moved one's new events are not written yet)."""
    conn.execute(
        "UPDATE tasks SET snapshot=v.column2, last_seq=last_seq+v.column3 FROM (VALUES "
        f"{_rows(len(appends), 3)}) AS v WHERE tasks.id=v.column1 AND tasks.state='running'"
        " AND EXISTS (SELECT 1 FROM task_events e WHERE e.task_id=tasks.id"
        " AND e.seq=tasks.last_seq)",
        [x for a in appends for x in (a.task_id, a.snapshot_json, len(a.deltas))],
    )
    # `+t.state`: found by id; an index on the state would visit every running task.
    (found,) = conn.execute(
        "SELECT json_group_array(json_array(t.id, t.last_seq, t.model, r.item_id)) FROM tasks t"
        f" JOIN responses r ON r.id=t.id WHERE t.id IN ({_marks(len(appends))})"
        " AND +t.state='running'",
        [a.task_id for a in appends],
    ).fetchone()
    return {task_id: (last, model, item) for task_id, last, model, item in orjson.loads(found)}


class Numbering:
    """Each generating task's next event number and message item as the loop foresees them
    (from its previous append), so its next deltas' rows are built on the loop, while the
    writer runs the batch before (B2). Only a guess: the writer checks it against the log
    and numbers the rows itself when it differs. Any other write of the task (a move, a
    cancel, tool output) forgets it; a task's first append after that is numbered by the
    writer, and its outcome teaches the next."""

    def __init__(self) -> None:
        self._last: dict[str, Appended] = {}  # each task's last append, as committed or foreseen

    def rows(self, task_id: str, deltas: Sequence[str]) -> tuple[list[Any] | None, Appended | None]:
        """The deltas' rows (flat) and what their append gives, if foreseen."""
        last = self._last.get(task_id)
        if last is None or not deltas:
            return None, None
        foreseen = Appended(
            last.last_seq + len(deltas), last.model, last.item_id, last.last_seq + 1
        )
        self._last[task_id] = foreseen
        rows = numbered_deltas(task_id, foreseen.item_id, deltas, foreseen.first_seq, time.time())
        return list(chain.from_iterable(rows)), foreseen

    def forget(self, task_id: str) -> None:
        self._last.pop(task_id, None)

    def learn(self, appends: dict[str, Append], done: dict[str, Appended]) -> None:
        """On the loop, once a batch's outcome is known: each task the loop did not foresee
        right goes on from what the writer found (a finish ends it: nothing to foresee)."""
        for task_id, appended in done.items():
            append = appends[task_id]
            if append.finish is None and append.foreseen != appended:
                self._last[task_id] = appended


def _rows(n: int, width: int) -> str:
    row = "(" + ",".join("?" * width) + ")"
    return ",".join([row] * n)


def _marks(n: int) -> str:
    return ",".join("?" * n)
