"""Recovery at startup: every cell of table 11.3, the report, and idempotence."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.states import RECOVERY_TABLE, RestartPolicy, TaskState
from lmsp_desktop.core.storage import recovery
from lmsp_desktop.core.storage.recovery import last_report, next_boot, recover
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.transitions import ALIKE_AT_LEAST
from tests.support.store_helpers import check_invariants, drive, dump

EVENT_OF_OUTCOME = {
    TaskState.FAILED: "response.failed",
    TaskState.QUEUED: "response.queued",
    TaskState.RUNNING: "response.resumed",
    TaskState.CANCELLED: "response.cancelled",
}

# The twelve cells of table 11.3, written out here rather than read from states.py, so a
# wrong entry there fails this test.
TABLE_11_3 = {
    ("queued", "fail"): "failed",
    ("queued", "retry"): "queued",
    ("queued", "resume"): "queued",
    ("loading", "fail"): "failed",
    ("loading", "retry"): "queued",
    ("loading", "resume"): "queued",
    ("running", "fail"): "failed",
    ("running", "retry"): "queued",
    ("running", "resume"): "running",
    ("cancelling", "fail"): "cancelled",
    ("cancelling", "retry"): "cancelled",
    ("cancelling", "resume"): "cancelled",
}
CELLS = [(TaskState(s), RestartPolicy(p)) for s, p in TABLE_11_3]


def test_the_table_in_states_matches_the_spec() -> None:
    assert {(str(s), str(p)): str(a) for (s, p), a in RECOVERY_TABLE.items()} == TABLE_11_3


async def restart(store: Store) -> Store:
    """Close the store as a crash would leave it and open it again, like a new process."""
    await store.close()
    reopened = Store(store.data_dir)
    await reopened.open()
    return reopened


@pytest.mark.parametrize(("state", "policy"), CELLS, ids=lambda v: str(v))
async def test_cell_of_table_11_3(data_dir: Path, state: TaskState, policy: RestartPolicy) -> None:
    store = Store(data_dir)
    await store.open()
    try:
        task_id = await drive(store.tasks, state, on_restart=policy)
        before = await store.tasks.get(task_id)
        store = await restart(store)
        report = await recover(store.tasks, await next_boot(store.tasks))

        expected = TaskState(TABLE_11_3[(str(state), str(policy))])
        row = await store.tasks.get(task_id)
        assert row["state"] == expected
        events = await store.tasks.events(task_id)
        last = events[-1]
        assert last["type"] == EVENT_OF_OUTCOME[expected]
        assert row["last_seq"] == last["sequence_number"]
        body = await store.tasks.response_object(task_id)

        if expected == TaskState.FAILED:
            assert body["error"]["code"] == "server_restarted"
            assert last["response"]["error"]["code"] == "server_restarted"
            assert body["status"] == "failed" and row["finished_at"] is not None
        elif expected == TaskState.QUEUED:
            assert last["response"]["output"] == []
            assert row["item_id"] is None and row["output_text"] == ""
            assert row["snapshot"] is None and row["restarts"] == 1
            assert body["task"]["queue_position"] == 1
            # The next run opens a new output item with a new id.
            new_item = await store.tasks.mark_running(task_id)
            assert new_item and new_item != before["item_id"]
        elif expected == TaskState.RUNNING:
            assert row["snapshot"] == before["snapshot"] is not None
            assert row["output_text"] == before["output_text"] == "Hello"
            assert row["item_id"] == before["item_id"] and row["restarts"] == 1
            assert last["response"]["output"][0]["content"][0]["text"] == "Hello"
            # It continues: deltas are accepted and completion closes the same item.
            assert await store.tasks.append_deltas(
                task_id, ["!"], output_tokens=3, input_tokens=3, snapshot={"tokens": [1, 2, 3]}
            )
            assert await store.tasks.finish(
                task_id, incomplete_reason=None, input_tokens=3, output_tokens=3
            )
            assert (await store.tasks.response_object(task_id))["output_text"] == "Hello!"
        else:
            assert body["status"] == "cancelled" and row["finished_at"] is not None
            assert body["output_text"] == before["output_text"]  # partial output kept

        (item,) = report.items
        assert (item.task_id, item.model, item.state_before, item.on_restart) == (
            task_id,
            "m",
            str(state),
            str(policy),
        )
        assert (item.state_after, item.event_type) == (str(expected), last["type"])
        assert item.sequence_number == last["sequence_number"]
        stored = await last_report(store.tasks)
        assert stored is not None and stored["items"] == [report.as_json()["items"][0]]
        check_invariants(store.db.path)
    finally:
        await store.close()


async def test_each_task_of_a_crowded_cell_is_moved_as_a_lone_one(store: Store) -> None:
    """A cell's tasks are moved together, their rows by one statement from ALIKE_AT_LEAST
    tasks on (10k at startup): each still gets its cell's state and event, its own last
    sequence number, one restart more for a rerun, and this startup's mark."""
    ids = {
        cell: [await drive(store.tasks, cell[0], on_restart=cell[1]) for _ in range(ALIKE_AT_LEAST)]
        for cell in CELLS
    }
    boot = await next_boot(store.tasks)
    report = await recover(store.tasks, boot)
    numbers = {item.task_id: item.sequence_number for item in report.items}
    assert len(numbers) == len(CELLS) * ALIKE_AT_LEAST
    for (state, policy), task_ids in ids.items():
        expected = TaskState(TABLE_11_3[(str(state), str(policy))])
        for task_id in task_ids:
            row = await store.tasks.get(task_id)
            last = (await store.tasks.events(task_id))[-1]
            assert (row["state"], last["type"]) == (expected, EVENT_OF_OUTCOME[expected])
            assert row["last_seq"] == last["sequence_number"] == numbers[task_id]
            reruns = expected in (TaskState.QUEUED, TaskState.RUNNING)
            assert row["restarts"] == (1 if reruns else 0)
            assert row["recovered_boot"] == boot
    check_invariants(store.db.path)


async def test_running_recovery_twice_changes_nothing_more(store: Store) -> None:
    for state, policy in CELLS:
        await drive(store.tasks, state, on_restart=policy)
    boot = await next_boot(store.tasks)
    first = await recover(store.tasks, boot)
    assert len(first.items) == 12
    after_first = dump(store.db.path)
    report_first = await last_report(store.tasks)
    second = await recover(store.tasks, boot)
    assert second.items == []
    assert dump(store.db.path) == after_first
    assert await last_report(store.tasks) == report_first


async def test_each_startup_recovers_what_the_previous_one_left(data_dir: Path) -> None:
    store = Store(data_dir)
    await store.open()
    try:
        task_id = await drive(store.tasks, TaskState.RUNNING, on_restart=RestartPolicy.RETRY)
        for n in (1, 2):
            store = await restart(store)
            report = await recover(store.tasks, await next_boot(store.tasks))
            assert [i.task_id for i in report.items] == [task_id]
            assert (await store.tasks.get(task_id))["restarts"] == n
        check_invariants(store.db.path)
    finally:
        await store.close()


async def test_finished_tasks_are_left_alone(store: Store) -> None:
    for state in (TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.FAILED):
        await drive(store.tasks, state, on_restart=RestartPolicy.RETRY)
    await drive(store.tasks, TaskState.CANCELLED, on_restart=RestartPolicy.RESUME)
    before = dump(store.db.path)
    report = await recover(store.tasks, await next_boot(store.tasks))
    assert report.items == [] and report.summary() == ""
    assert dump(store.db.path) == before
    assert await last_report(store.tasks) is None


async def test_report_summary_and_json(store: Store) -> None:
    for state, policy in CELLS:
        await drive(store.tasks, state, on_restart=policy)
    report = await recover(store.tasks, await next_boot(store.tasks))
    assert report.summary() == (
        "3 failed with server_restarted, 5 requeued, 1 resumed, 3 cancelled"
    )
    data = report.as_json()
    assert isinstance(data["started_at"], int) and data["started_at"] <= data["finished_at"]
    assert set(data["items"][0]) == {
        "task_id",
        "model",
        "state_before",
        "on_restart",
        "state_after",
        "event_type",
        "sequence_number",
        "tokens_kept",
        "bytes_kept",  # a download's; None for the others
    }
    assert await last_report(store.tasks) == json.loads(json.dumps(data))


async def test_a_resumed_task_reports_the_tokens_its_snapshot_kept(store: Store) -> None:
    """The recovery dialog says "Resumed after 412 tokens": the count is the snapshot's."""
    resumed = await drive(store.tasks, TaskState.RUNNING, on_restart=RestartPolicy.RESUME)
    fresh = await drive(store.tasks, TaskState.LOADING, on_restart=RestartPolicy.RESUME)
    assert await store.tasks.mark_running(fresh)  # killed before its first token
    retried = await drive(store.tasks, TaskState.RUNNING, on_restart=RestartPolicy.RETRY)
    for task_id in (resumed, retried):
        await store.tasks.append_deltas(
            task_id,
            ["x"] * 412,
            output_tokens=412,
            input_tokens=9,
            snapshot={"tokens": list(range(412)), "seed": 7},
        )
    report = await recover(store.tasks, await next_boot(store.tasks))
    kept = {item.task_id: item.tokens_kept for item in report.items}
    assert kept == {resumed: 412, fresh: 0, retried: None}  # retry starts over: none kept
    stored = await last_report(store.tasks)
    assert stored is not None
    assert {i["task_id"]: i["tokens_kept"] for i in stored["items"]} == kept


async def test_last_report_is_the_latest_startup_with_leftovers(data_dir: Path) -> None:
    store = Store(data_dir)
    await store.open()
    try:
        first = await drive(store.tasks, TaskState.QUEUED)
        await recover(store.tasks, await next_boot(store.tasks))
        second = await drive(store.tasks, TaskState.LOADING)
        store = await restart(store)
        await recover(store.tasks, await next_boot(store.tasks))
        report = await last_report(store.tasks)
        assert report is not None
        assert [i["task_id"] for i in report["items"]] == [second]
        assert first != second
    finally:
        await store.close()


async def test_boots_are_counted_durably(data_dir: Path) -> None:
    store = Store(data_dir)
    await store.open()
    try:
        assert await next_boot(store.tasks) == 1
        store = await restart(store)
        assert await next_boot(store.tasks) == 2
    finally:
        await store.close()


async def test_listeners_hear_every_recovered_task(store: Store) -> None:
    ids = [await drive(store.tasks, s, on_restart=p) for s, p in CELLS]
    heard: list[str] = []
    store.tasks.listeners.append(lambda change: heard.append(change.task_id))
    await recover(store.tasks, await next_boot(store.tasks))
    assert sorted(heard) == sorted(ids)


async def test_concurrent_recoveries_handle_each_task_once(store: Store) -> None:
    ids = [await drive(store.tasks, s, on_restart=p) for s, p in CELLS]
    boot = await next_boot(store.tasks)
    reports = await asyncio.gather(recover(store.tasks, boot), recover(store.tasks, boot))
    handled = [i.task_id for r in reports for i in r.items]
    assert sorted(handled) == sorted(ids)
    for task_id in ids:
        assert (await store.tasks.get(task_id))["restarts"] <= 1
    check_invariants(store.db.path)


async def test_startup_recovery_is_one_transaction_with_its_report(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All leftovers and the report commit together: a failure on the last slice of tasks
    leaves every task as it was and no report, and the next start recovers them all."""
    ids = [await drive(store.tasks, s, on_restart=p) for s, p in CELLS]
    before = {task_id: (await store.tasks.get(task_id))["state"] for task_id in ids}
    monkeypatch.setattr(recovery, "BATCH", 5)  # three slices of the twelve tasks
    original = recovery._recover_batch
    slices: list[list[str]] = []

    def failing_on_the_last(conn: sqlite3.Connection, **kwargs: Any) -> Any:
        slices.append(kwargs["ids"])
        if len(slices) == 3:
            raise sqlite3.OperationalError("disk I/O error")
        return original(conn, **kwargs)

    monkeypatch.setattr(recovery, "_recover_batch", failing_on_the_last)
    with pytest.raises(sqlite3.OperationalError):
        await recover(store.tasks, await next_boot(store.tasks))
    assert {t: (await store.tasks.get(t))["state"] for t in ids} == before
    assert await last_report(store.tasks) is None

    monkeypatch.setattr(recovery, "_recover_batch", original)
    report = await recover(store.tasks, await next_boot(store.tasks))
    assert sorted(item.task_id for item in report.items) == sorted(ids)
    stored = await last_report(store.tasks)
    assert stored is not None and len(stored["items"]) == len(ids)
    check_invariants(store.db.path)


async def test_recovery_gives_back_the_page_cache_it_takes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery holds every page it changes in the writer's page cache until its commit (a
    page spilled to the WAL and changed again is written twice), and the service then runs
    with its usual cache again, not one sized for thousands of recovered tasks."""
    ids = [await drive(store.tasks, s, on_restart=p) for s, p in CELLS]

    def cache_size(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA cache_size").fetchone()[0])

    usual = await store.db.run(cache_size)
    monkeypatch.setattr(recovery, "CACHE_KIB_PER_TASK", 1024)  # 12 MiB: over the usual 2
    original = recovery._recover_batch
    during: list[int] = []

    def watching(conn: sqlite3.Connection, **kwargs: Any) -> Any:
        during.append(cache_size(conn))
        return original(conn, **kwargs)

    monkeypatch.setattr(recovery, "_recover_batch", watching)
    report = await recover(store.tasks, await next_boot(store.tasks))
    assert sorted(item.task_id for item in report.items) == sorted(ids)
    assert during == [-len(ids) * 1024]
    assert await store.db.run(cache_size) == usual
