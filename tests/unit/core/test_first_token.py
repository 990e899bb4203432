"""The time of a task's first output token: the runner's, in memory while the task runs, and
stored by the move that ends the task (tasks.first_token_at), never with each delta."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from lmsp_desktop.core.engines.fake import DEFAULT_TOKENS, FakeEngine
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import finishing
from lmsp_desktop.core.storage.transitions import first_tokens
from lmsp_desktop.core.views import TaskFilter, TaskRow
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.support.store_helpers import drive
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
    for n, task_id in enumerate(ids[:3]):
        first_tokens[task_id] = 1_000_000.0 + n
    try:
        assert await store.tasks.append_deltas(
            completed,
            ["!"],
            output_tokens=3,
            input_tokens=5,
            snapshot=None,
            finish=finishing(completed, incomplete_reason=None, input_tokens=5, output_tokens=3),
        )
        assert await store.tasks.fail(failed, "engine_error", "it broke")
        await store.tasks.cancel(cancelled)
        assert await store.tasks.confirm_cancelled(cancelled)
        assert await store.tasks.fail(unknown, "engine_error", "it broke")
    finally:
        for task_id in ids:
            first_tokens.pop(task_id, None)
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
    assert task_id not in first_tokens  # dropped with its run
