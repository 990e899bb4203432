"""Retention: old finished tasks go with their events and responses, in bounded batches;
unfinished tasks stay whatever their age; idempotency keys expire on their own clock."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage import retention
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim, purge_expired
from lmsp_desktop.core.storage.retention import purge_finished
from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import check_invariants, drive, new_task

DAY = 86400.0
FINISHED = [TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.FAILED, TaskState.CANCELLED]
UNFINISHED = [TaskState.QUEUED, TaskState.LOADING, TaskState.RUNNING, TaskState.CANCELLING]


def count(store: Store, table: str, where: str = "1", params: tuple[Any, ...] = ()) -> int:
    conn = sqlite3.connect(store.db.path)
    try:
        return int(
            conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}", params).fetchone()[0]
        )
    finally:
        conn.close()


async def test_old_finished_tasks_are_purged_with_events_and_responses(store: Store) -> None:
    old = [await drive(store.tasks, s) for s in FINISHED]
    later = time.time() + 8 * DAY
    young = await drive(store.tasks, TaskState.COMPLETED)
    # The young task finished "just now" from the point of view of the purge below.
    await store.db.run(
        lambda conn: conn.execute(
            "UPDATE tasks SET finished_at=? WHERE id=?", (later - DAY, young)
        ).close()
    )
    purged = await purge_finished(store.db, 7, now=later)
    assert purged == len(old)
    for task_id in old:
        assert count(store, "tasks", "id=?", (task_id,)) == 0
        assert count(store, "responses", "id=?", (task_id,)) == 0
        assert count(store, "task_events", "task_id=?", (task_id,)) == 0
    assert (await store.tasks.get(young))["state"] == "completed"
    check_invariants(store.db.path)


async def test_nothing_is_purged_within_the_period(store: Store) -> None:
    for state in FINISHED:
        await drive(store.tasks, state)
    assert await purge_finished(store.db, 7, now=time.time() + 6.9 * DAY) == 0
    assert count(store, "tasks") == len(FINISHED)


async def test_unfinished_tasks_are_never_purged_at_any_age(store: Store) -> None:
    keep = [await drive(store.tasks, s) for s in UNFINISHED]
    # Ancient, and even carrying a stray finish time: still unfinished, still kept.
    await store.db.run(
        lambda conn: conn.execute(
            "UPDATE tasks SET created_at=0, started_at=0, finished_at=0"
        ).close()
    )
    gone = await drive(store.tasks, TaskState.COMPLETED)
    purged = await purge_finished(store.db, 0.001, now=time.time() + 3650 * DAY)
    assert purged == 1
    assert count(store, "tasks", "id=?", (gone,)) == 0
    for task_id in keep:
        assert count(store, "tasks", "id=?", (task_id,)) == 1
        assert count(store, "responses", "id=?", (task_id,)) == 1
        last_seq = (await store.tasks.get(task_id))["last_seq"]
        assert count(store, "task_events", "task_id=?", (task_id,)) == last_seq
    check_invariants(store.db.path)


def instrument(monkeypatch: pytest.MonkeyPatch, clock: Any = None) -> list[list[int]]:
    """Record, per purge transaction, how many task events each of its steps deleted."""
    batches: list[list[int]] = []
    original_batch, original_step = retention._purge_in, retention._step

    def batch(conn: sqlite3.Connection, **kwargs: Any) -> tuple[int, bool]:
        batches.append([])
        return original_batch(conn, **kwargs, **({"clock": clock} if clock else {}))

    def step(conn: sqlite3.Connection, cutoff: float) -> int:
        before = conn.execute("SELECT COUNT(*) FROM task_events").fetchone()[0]
        result = original_step(conn, cutoff)
        after = conn.execute("SELECT COUNT(*) FROM task_events").fetchone()[0]
        if result >= 0:
            batches[-1].append(before - after)
        return result

    monkeypatch.setattr(retention, "_purge_in", batch)
    monkeypatch.setattr(retention, "_step", step)
    return batches


async def add_events(store: Store, task_id: str, n: int) -> None:
    assert await store.tasks.append_deltas(
        task_id, ["x"] * n, output_tokens=n, input_tokens=1, snapshot=None
    )


async def old_tasks(store: Store, limit: int) -> tuple[list[str], str, int]:
    """One task far larger than a step, many small ones that together are too, and one
    unfinished task with a large log. Returns (old task ids, the kept id, old events)."""
    big = await drive(store.tasks, TaskState.RUNNING)
    await add_events(store, big, 2 * limit + 7)
    await store.tasks.finish(big, incomplete_reason=None, input_tokens=1, output_tokens=1)
    small = [await drive(store.tasks, TaskState.COMPLETED) for _ in range(30)]
    keep = await drive(store.tasks, TaskState.RUNNING)
    await add_events(store, keep, limit + 1)
    total_old = count(store, "task_events", "task_id<>?", (keep,))
    assert total_old > 2 * limit
    return [big, *small], keep, total_old


@pytest.mark.parametrize("per_step", [None, 50])
async def test_steps_are_bounded(
    store: Store, monkeypatch: pytest.MonkeyPatch, per_step: int | None
) -> None:
    limit = per_step or retention.EVENTS_PER_STEP
    monkeypatch.setattr(retention, "EVENTS_PER_STEP", limit)
    old, _keep, total_old = await old_tasks(store, limit)

    batches = instrument(monkeypatch)
    # No time at all for a batch: each transaction does its one step, and no more.
    purged = await purge_finished(store.db, 7, now=time.time() + 8 * DAY, batch_s=0)
    steps = [deleted for batch in batches for deleted in batch]
    assert purged == len(old)
    assert all(len(batch) <= 1 for batch in batches)
    assert max(steps) <= limit, f"a step deleted {max(steps)} events"
    assert sum(steps) == total_old
    assert len([d for d in steps if d]) >= 3
    assert count(store, "tasks") == 1
    check_invariants(store.db.path)


async def test_a_batch_stops_by_time_not_by_count(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step costs 7 ms on this clock: a 20 ms batch takes two steps (a third as long
    would end past the budget), whatever their size, and the next batch goes on where it
    stopped."""
    monkeypatch.setattr(retention, "EVENTS_PER_STEP", 50)
    old, keep, total_old = await old_tasks(store, 50)
    ticks = iter(range(0, 10**6, 7))
    batches = instrument(monkeypatch, clock=lambda: next(ticks) / 1000)

    purged = await purge_finished(store.db, 7, now=time.time() + 8 * DAY, batch_s=0.020)
    assert purged == len(old)
    assert [len(batch) for batch in batches[:-1]] == [2] * (len(batches) - 1)
    assert sum(map(sum, batches)) == total_old
    assert count(store, "tasks") == 1 and count(store, "tasks", "id=?", (keep,)) == 1
    check_invariants(store.db.path)


async def test_the_purge_reads_finished_tasks_by_their_own_index(store: Store) -> None:
    """A step is a range of tasks_expiry: it must not scan every finished task (the state
    index and a sort cost 0.8 s per step at 100k tasks)."""
    plan = await store.db.fetchall(
        "EXPLAIN QUERY PLAN SELECT id, last_seq FROM tasks INDEXED BY tasks_expiry "
        f"WHERE state IN ({retention.TERMINAL_SQL}) AND finished_at < ? "
        "ORDER BY finished_at LIMIT 10",
        (time.time(),),
    )
    details = " ".join(row["detail"] for row in plan)
    assert "COVERING INDEX tasks_expiry" in details and "TEMP B-TREE" not in details


async def test_idempotency_keys_expire_on_their_own_clock(store: Store) -> None:
    claim = IdempotencyClaim("client_a", "key-1", "digest", ttl_s=3600)
    created = await store.tasks.create(new_task(client_id="client_a"), claim)
    await drive(store.tasks, TaskState.COMPLETED)
    t0 = time.time()
    assert await purge_expired(store.db, now=t0 + 1800) == 0
    assert count(store, "idempotency_keys") == 1
    # An hour later the key is gone, while the task it created is well within retention.
    assert await purge_expired(store.db, now=t0 + 3601) == 1
    assert count(store, "idempotency_keys") == 0
    assert count(store, "tasks", "id=?", (created.task_id,)) == 1
    # And the task retention purge leaves a live key alone.
    other = IdempotencyClaim("client_a", "key-2", "digest", ttl_s=30 * 86400)
    await store.tasks.create(new_task(client_id="client_a"), other)
    await purge_finished(store.db, 7, now=t0 + 8 * DAY)
    assert count(store, "idempotency_keys") == 1


async def test_expired_keys_are_purged_in_batches(store: Store) -> None:
    now = int(time.time())

    def keys(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO idempotency_keys (client_id, key, request_digest, state, created_at,"
            " expires_at) VALUES ('c', ?, 'd', 'done', ?, ?)",
            [(f"k{i}", now - 10, now - 1) for i in range(1234)],
        )
        conn.execute(
            "INSERT INTO idempotency_keys (client_id, key, request_digest, state, created_at,"
            " expires_at) VALUES ('c', 'live', 'd', 'done', ?, ?)",
            (now, now + 3600),
        )

    await store.db.run(keys)
    assert await purge_expired(store.db, batch=500) == 1234
    assert count(store, "idempotency_keys") == 1
