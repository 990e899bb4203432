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


def instrument(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many task events each purge transaction deleted."""
    deleted: list[int] = []
    original = retention._purge_in

    def counting(conn: sqlite3.Connection, cutoff: float) -> int:
        before = conn.execute("SELECT COUNT(*) FROM task_events").fetchone()[0]
        result = original(conn, cutoff)
        deleted.append(before - conn.execute("SELECT COUNT(*) FROM task_events").fetchone()[0])
        return result

    monkeypatch.setattr(retention, "_purge_in", counting)
    return deleted


async def add_events(store: Store, task_id: str, n: int) -> None:
    assert await store.tasks.append_deltas(
        task_id, ["x"] * n, output_tokens=n, input_tokens=1, snapshot=None
    )


@pytest.mark.parametrize("per_batch", [None, 50])
async def test_batches_are_bounded(
    store: Store, monkeypatch: pytest.MonkeyPatch, per_batch: int | None
) -> None:
    limit = per_batch or retention.EVENTS_PER_BATCH
    monkeypatch.setattr(retention, "EVENTS_PER_BATCH", limit)
    # One task far larger than a batch, and many small ones that together are too.
    big = await drive(store.tasks, TaskState.RUNNING)
    await add_events(store, big, 2 * limit + 7)
    await store.tasks.finish(big, incomplete_reason=None, input_tokens=1, output_tokens=1)
    small = [await drive(store.tasks, TaskState.COMPLETED) for _ in range(30)]
    keep = await drive(store.tasks, TaskState.RUNNING)
    await add_events(store, keep, limit + 1)
    total_old = count(store, "task_events", "task_id<>?", (keep,))
    assert total_old > 2 * limit

    deleted = instrument(monkeypatch)
    purged = await purge_finished(store.db, 7, now=time.time() + 8 * DAY)
    assert purged == len(small) + 1
    assert max(deleted) <= limit, f"a transaction deleted {max(deleted)} events"
    assert sum(deleted) == total_old
    assert len([d for d in deleted if d]) >= 3
    assert count(store, "tasks") == 1
    check_invariants(store.db.path)


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
