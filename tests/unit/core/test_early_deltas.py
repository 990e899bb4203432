"""The runner's appends are answered while their commit syncs (issue 26, B2), yet nothing is
heard before the commit (rule 11.2), and a commit that fails after the answer stops the
task's log where it was: the deltas queued behind it are refused, the next finish raises."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import finishing
from tests.support.store_helpers import check_invariants, drive
from tests.support.store_helpers import deltas_of as committed_deltas

T = TypeVar("T")
HANG = 30  # a bound for the failure case only: the waits below end at once otherwise


async def append(store: Store, task_id: str, words: list[str], n: int, **kw: Any) -> bool:
    return await store.tasks.append_deltas(
        task_id, words, output_tokens=n, input_tokens=3, snapshot={"tokens": list(range(n))}, **kw
    )


class Held:
    """A unit of work that joins the group of the appends submitted just before it, and
    waits in the writer thread, inside their transaction, until released: their COMMIT has
    not happened while it holds. `poison` also makes that COMMIT fail, as a full disk would:
    a row breaking a deferred foreign key (SQLite checks it only at COMMIT)."""

    def __init__(self, store: Store, *, poison: bool = False) -> None:
        self.holding = threading.Event()
        self.release = threading.Event()

        def work(conn: sqlite3.Connection) -> None:
            if poison:
                conn.execute("PRAGMA defer_foreign_keys=ON")
                conn.execute(
                    "INSERT INTO tasks (id, model, state, on_restart, mode, created_at, last_seq)"
                    " VALUES ('no-such-response', 'm', 'queued', 'fail', 'background', 0, 0)"
                )
            self.holding.set()
            self.release.wait(HANG)

        self.done = store.db.submit(work)


async def after_a_failed_commit(store: Store, task_id: str, then: Callable[[], T]) -> T:
    """An early append of `task_id` answered True, then `then()` (what the runner does next:
    it starts its tasks while that append's COMMIT is held), then the COMMIT fails (a deferred
    foreign key, as a full disk would). Returns what `then` returned."""
    lost = asyncio.create_task(append(store, task_id, [" lost"], 3, early=True))
    await asyncio.sleep(0)
    held = Held(store, poison=True)
    try:
        assert await asyncio.wait_for(lost, HANG) is True  # answered before the COMMIT
        made = then()
        await asyncio.sleep(0)
    finally:
        held.release.set()
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        await held.done  # the COMMIT failed: nothing of that group was written
    return made


async def test_an_early_append_is_answered_while_its_commit_waits_and_heard_only_after_it(
    store: Store,
) -> None:
    task_id = await drive(store.tasks, TaskState.RUNNING)  # "Hel", "lo"
    before = (await store.tasks.get(task_id))["last_seq"]
    heard: list[int] = []
    store.tasks.listeners.append(lambda change: heard.append(change.last_seq))
    appended = asyncio.create_task(append(store, task_id, [" a", " b"], 4, early=True))
    await asyncio.sleep(0)  # the append's batch is submitted...
    held = Held(store)  # ...and this unit joins its group, after it
    try:
        # Answered although the COMMIT has not happened: the task was running.
        assert await asyncio.wait_for(appended, HANG) is True
        await asyncio.get_running_loop().run_in_executor(None, held.holding.wait, HANG)
        assert not held.done.done()  # the COMMIT still waits for the test
        assert heard == []  # rule 11.2: no listener (no stream) hears uncommitted deltas
        assert committed_deltas(store, task_id) == ["Hel", "lo"]
    finally:
        held.release.set()
    await held.done
    assert committed_deltas(store, task_id) == ["Hel", "lo", " a", " b"]
    assert heard == [before + 2]  # heard once committed: the two deltas
    check_invariants(store.db.path)


async def test_an_append_that_is_not_early_waits_for_its_commit(store: Store) -> None:
    """The default (every caller but the runner's hand-over): answered once durable."""
    task_id = await drive(store.tasks, TaskState.RUNNING)
    appended = asyncio.create_task(append(store, task_id, [" a"], 3))
    await asyncio.sleep(0)
    held = Held(store)
    try:
        await asyncio.get_running_loop().run_in_executor(None, held.holding.wait, HANG)
        await asyncio.sleep(0.05)  # time for an answer that should not come
        assert not appended.done()
    finally:
        held.release.set()
    assert await appended is True
    assert committed_deltas(store, task_id) == ["Hel", "lo", " a"]


async def test_deltas_queued_behind_a_failed_commit_are_refused_and_others_go_on(
    store: Store,
) -> None:
    first, other = [await drive(store.tasks, TaskState.RUNNING) for _ in range(2)]
    # The runner goes on: its next deltas queue behind the commit still going on.
    behind, beside = await after_a_failed_commit(
        store,
        first,
        lambda: (
            asyncio.create_task(append(store, first, [" behind"], 4, early=True)),
            asyncio.create_task(append(store, other, [" kept"], 3)),  # answered durable
        ),
    )
    # Deltas after the ones that were not written would leave a hole in the text: refused
    # with the commit's error, which makes the runner fail the task.
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        await asyncio.wait_for(behind, HANG)
    assert await asyncio.wait_for(beside, HANG) is True  # another task is not affected
    assert committed_deltas(store, first) == ["Hel", "lo"]
    assert committed_deltas(store, other) == ["Hel", "lo", " kept"]
    row = await store.tasks.get(first)
    assert row["state"] == TaskState.RUNNING and row["output_text"] == "Hello"
    check_invariants(store.db.path)


async def test_a_finish_after_a_failed_early_append_raises_and_leaves_the_task_running(
    store: Store,
) -> None:
    task_id = await drive(store.tasks, TaskState.RUNNING)
    # The generation ends now: its finish must not close a log missing " lost".
    finishing = await after_a_failed_commit(
        store,
        task_id,
        lambda: asyncio.create_task(
            store.tasks.finish(task_id, incomplete_reason=None, input_tokens=3, output_tokens=3)
        ),
    )
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        await asyncio.wait_for(finishing, HANG)
    row = await store.tasks.get(task_id)
    # Still running with the text it had: the runner fails it, or a restart resumes it from
    # the snapshot that covers exactly that text.
    assert row["state"] == TaskState.RUNNING and row["output_text"] == "Hello"
    assert committed_deltas(store, task_id) == ["Hel", "lo"]
    # Told once: the runner's next move (failing the task) goes through.
    assert await store.tasks.fail(task_id, "storage_error", "the deltas could not be written")
    check_invariants(store.db.path)


@pytest.mark.parametrize("with_finish", [False, True], ids=["deltas", "last-deltas-and-finish"])
async def test_a_lone_task_behind_a_failed_commit_gets_that_commits_error(
    store: Store, with_finish: bool
) -> None:
    """The common case (review of 7817270): one task generating, so its next hand-over (its
    next deltas, or its last ones with the finish) is alone behind the commit that fails after
    the early answer: refused with that commit's error, not a statement's over nothing."""
    task_id = await drive(store.tasks, TaskState.RUNNING)
    finish = finishing(task_id, incomplete_reason=None, input_tokens=3, output_tokens=4)
    behind = await after_a_failed_commit(
        store,
        task_id,
        lambda: asyncio.create_task(
            append(store, task_id, [" next"], 4, **({"finish": finish} if with_finish else {}))
        ),
    )
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        await asyncio.wait_for(behind, HANG)
    assert committed_deltas(store, task_id) == ["Hel", "lo"]


async def test_an_early_no_whose_commit_failed_leaves_no_error_for_the_tasks_next_run(
    store: Store,
) -> None:
    """A cancel and an early append in one group: the append is answered False (the task was
    cancelling), then the group's COMMIT fails, the cancel with it. The task is still running;
    its next run's appends must go through, not meet an error meant for written deltas."""
    task_id = await drive(store.tasks, TaskState.RUNNING)
    first = Held(store)  # the writer busy: the next three units wait and form one group
    await asyncio.get_running_loop().run_in_executor(None, first.holding.wait, HANG)
    cancel = asyncio.create_task(store.tasks.cancel(task_id))
    for _ in range(3):
        await asyncio.sleep(0)
    refused = asyncio.create_task(append(store, task_id, [" no"], 3, early=True))
    for _ in range(3):
        await asyncio.sleep(0)
    poison = Held(store, poison=True)
    first.release.set()
    try:
        assert await asyncio.wait_for(refused, HANG) is False  # answered before the COMMIT
    finally:
        poison.release.set()
    await first.done
    for unit in (poison.done, cancel):
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            await unit
    assert (await store.tasks.get(task_id))["state"] == TaskState.RUNNING  # rolled back
    assert await append(store, task_id, [" again"], 3) is True
    assert committed_deltas(store, task_id) == ["Hel", "lo", " again"]


async def test_a_long_early_generation_does_not_keep_its_old_batches(store: Store) -> None:
    """Each early append checks the batch of the one before; once checked, that batch must be
    let go, or a generation would keep every hand-over (snapshots and all) until it ends."""
    task_id = await drive(store.tasks, TaskState.RUNNING)
    batches: list[weakref.ref[Any]] = []
    for n in range(40):
        assert await append(store, task_id, [f" w{n}"], 3 + n, early=True)
        assert store.tasks._deltas is not None
        batches.append(weakref.ref(store.tasks._deltas))
    assert await append(store, task_id, [" end"], 43)  # durable: every commit before it ended
    gc.collect()
    alive = sum(ref() is not None for ref in batches)
    assert alive <= 2, f"{alive} of 40 batches still alive"
