"""The time of a task's first output token: the runner's, in memory while the task runs, and
stored by the move that ends the task (tasks.first_token_at), never with each delta."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.base import EngineCrashed, EngineError
from lmsp_desktop.core.engines.fake import DEFAULT_TOKENS, FakeEngine
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask, finishing
from lmsp_desktop.core.views import TaskFilter, TaskRow
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.support.store_helpers import drive, request
from tests.unit.core.test_runner import Paths, finished, submit


def stored_first_token(store: Store, task_id: str) -> Any:
    conn = sqlite3.connect(store.db.path)
    try:
        return conn.execute("SELECT first_token_at FROM tasks WHERE id=?", (task_id,)).fetchone()[0]
    finally:
        conn.close()


async def test_the_end_of_a_task_stores_the_first_token_time_known_in_memory(
    store: Store,
) -> None:
    """Finish with the last deltas, fail and a confirmed cancel each store it; an end without
    one known (recovery's, or before any token) leaves NULL; the list rows carry it."""
    ids = [await drive(store.tasks, TaskState.RUNNING) for _ in range(4)]
    completed, failed, cancelled, unknown = ids
    assert await store.tasks.append_deltas(
        completed,
        ["!"],
        output_tokens=3,
        input_tokens=5,
        snapshot=None,
        finish=finishing(
            completed,
            incomplete_reason=None,
            input_tokens=5,
            output_tokens=3,
            first_token_at=1_000_000.0,
        ),
    )
    assert await store.tasks.fail(failed, "engine_error", "it broke", first_token_at=1_000_001.0)
    await store.tasks.cancel(cancelled)
    assert await store.tasks.confirm_cancelled(cancelled, first_token_at=1_000_002.0)
    assert await store.tasks.fail(unknown, "engine_error", "it broke")
    assert [stored_first_token(store, t) for t in ids] == [
        1_000_000.0,
        1_000_001.0,
        1_000_002.0,
        None,
    ]
    rows = {r.id: r for r in map(TaskRow.of, await store.tasks.listed_by_id(ids, TaskFilter()))}
    assert rows[completed].first_token_at == 1_000_000.0 and rows[completed].input_tokens == 5
    assert rows[unknown].first_token_at is None


async def test_the_runner_knows_the_first_token_while_it_runs_and_its_end_stores_it(
    store: Store,
) -> None:
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        task_id = await submit(store)
        await until(lambda: bool(engine.requests))  # the generation has begun
        assert runner.first_token_at(task_id) is None  # nothing generated yet
        engine.gate.release(1)
        first = await until(lambda: runner.first_token_at(task_id))
        assert stored_first_token(store, task_id) is None  # kept in memory while it runs
        engine.gate.release(len(DEFAULT_TOKENS))
        await until(lambda: finished(store, task_id))
    row = await store.tasks.get(task_id)
    assert row["started_at"] < stored_first_token(store, task_id) == first < row["finished_at"]
    assert runner.first_token_at(task_id) is None  # dropped with its run


@pytest.mark.parametrize(
    ("error", "state"),
    [
        (EngineError("engine_error", "it broke"), "failed"),
        (EngineCrashed("m", "SIGKILL"), "failed"),  # failed by the crash's recovery
        (None, "cancelled"),
    ],
    ids=["engine_error", "engine_crashed", "cancelled"],
)
async def test_a_run_ended_after_its_first_token_stores_that_token_with_its_end(
    store: Store, error: EngineError | None, state: str
) -> None:
    """The runner hands its first token time to the move that ends the task, however the
    run ends: a fail, the recovery of its engine's crash, a confirmed cancel."""
    engine = FakeEngine(fail_at=2, fail_error=error)
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        task_id = await submit(store, on_restart="fail")
        await until(lambda: bool(engine.requests))
        engine.gate.release(1)
        first = await until(lambda: runner.first_token_at(task_id))
        if error is None:
            await store.tasks.cancel(task_id)
        else:
            engine.gate.release(1)  # the second token, then the error at the third
        await until(lambda: finished(store, task_id))
    row = await store.tasks.get(task_id)
    assert row["state"] == state and row["output_tokens"] >= 1
    assert stored_first_token(store, task_id) == first


async def test_two_task_stores_in_one_process_never_see_each_others_first_tokens(
    store: Store, tmp_path: Path
) -> None:
    """Two services in one process (tests, a copied data folder opened beside its original)
    with a task of the same id: one's running generation's first token is its runner's
    alone; the other's runner does not know it, and the other store's end of its own task
    does not store it."""
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    other = Store(tmp_path / "other")
    await other.open()
    try:
        async with started(Runner(store.tasks, Paths(), engine)) as runner:
            task_id = await submit(store)
            twin = NewTask(model="m", request=request(), id=task_id)
            assert (await other.tasks.create(twin)).task_id == task_id
            assert await other.tasks.mark_running(task_id)
            other_runner = Runner(other.tasks, Paths(), FakeEngine())
            await until(lambda: bool(engine.requests))
            engine.gate.release(1)
            first = await until(lambda: runner.first_token_at(task_id))
            assert other_runner.first_token_at(task_id) is None
            assert await other.tasks.fail(task_id, "engine_error", "it broke")
            assert stored_first_token(other, task_id) is None
            engine.gate.release(len(DEFAULT_TOKENS))
            await until(lambda: finished(store, task_id))
        assert stored_first_token(store, task_id) == first
    finally:
        await other.close()
