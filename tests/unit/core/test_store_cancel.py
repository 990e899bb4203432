"""Cancel exactly as LMSP_API.md "Cancel": one atomic, conditional transition."""

from __future__ import annotations

import asyncio

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import check_invariants, drive, dump, event_types


async def test_queued_is_cancelled_at_once(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.QUEUED)
    row = await store.tasks.cancel(task_id)
    assert row["state"] == "cancelled"
    assert row["finished_at"] is not None
    assert event_types(store.db.path, task_id) == ["response.created", "response.cancelled"]
    assert (await store.tasks.response_object(task_id))["status"] == "cancelled"
    check_invariants(store.db.path)


@pytest.mark.parametrize("state", [TaskState.LOADING, TaskState.RUNNING], ids=str)
async def test_loading_or_running_goes_through_cancelling(store: Store, state: TaskState) -> None:
    task_id = await drive(store.tasks, state)
    row = await store.tasks.cancel(task_id)
    assert row["state"] == "cancelling"
    assert event_types(store.db.path, task_id)[-1] == "response.cancelling"
    assert (await store.tasks.response_object(task_id))["status"] == "in_progress"
    assert await store.tasks.confirm_cancelled(task_id)
    final = await store.tasks.get(task_id)
    assert final["state"] == "cancelled" and final["finished_at"] is not None
    assert event_types(store.db.path, task_id)[-1] == "response.cancelled"
    check_invariants(store.db.path)


async def test_cancelled_running_task_keeps_its_partial_output(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.RUNNING)  # has produced "Hello"
    await store.tasks.cancel(task_id)
    await store.tasks.confirm_cancelled(task_id)
    body = await store.tasks.response_object(task_id)
    assert body["status"] == "cancelled"
    assert body["output_text"] == "Hello"
    assert body["output"][0]["content"][0]["text"] == "Hello"
    done = [
        e for e in await store.tasks.events(task_id) if e["type"] == "response.output_text.done"
    ]
    assert done[0]["text"] == "Hello"


@pytest.mark.parametrize("state", [TaskState.CANCELLING, TaskState.CANCELLED], ids=str)
async def test_cancel_is_idempotent(store: Store, state: TaskState) -> None:
    task_id = await drive(store.tasks, state)
    before = dump(store.db.path)
    heard: list[object] = []
    store.tasks.listeners.append(heard.append)
    for _ in range(3):
        row = await store.tasks.cancel(task_id)
        assert row["state"] == state
    assert dump(store.db.path) == before
    assert heard == []


@pytest.mark.parametrize(
    "state", [TaskState.COMPLETED, TaskState.FAILED, TaskState.INCOMPLETE], ids=str
)
async def test_finished_task_is_not_cancellable(store: Store, state: TaskState) -> None:
    task_id = await drive(store.tasks, state)
    before = dump(store.db.path)
    with pytest.raises(LmspError) as caught:
        await store.tasks.cancel(task_id)
    err = caught.value
    assert (err.status, err.code) == (409, "task_not_cancellable")
    assert err.body()["error"]["state"] == state
    assert str(state) in err.message
    assert dump(store.db.path) == before


async def test_cancel_unknown_or_someone_elses_is_404_and_writes_nothing(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.QUEUED, client_id="client_a")
    before = dump(store.db.path)
    for tid, client in (("resp_nope", None), (task_id, "client_b")):
        with pytest.raises(LmspError) as caught:
            await store.tasks.cancel(tid, client)
        assert caught.value.status == 404
    assert dump(store.db.path) == before
    assert (await store.tasks.cancel(task_id, "client_a"))["state"] == "cancelled"


@pytest.mark.parametrize("state", [TaskState.RUNNING, TaskState.LOADING], ids=str)
async def test_never_completed_after_cancelling_was_committed(
    store: Store, state: TaskState
) -> None:
    task_id = await drive(store.tasks, state)
    await store.tasks.cancel(task_id)
    assert not await store.tasks.finish(
        task_id, incomplete_reason=None, input_tokens=1, output_tokens=1
    )
    assert not await store.tasks.mark_running(task_id)
    assert not await store.tasks.fail(task_id, "engine_error", "late")
    assert (await store.tasks.get(task_id))["state"] == "cancelling"
    assert await store.tasks.confirm_cancelled(task_id)
    types = event_types(store.db.path, task_id)
    assert "response.completed" not in types and "response.failed" not in types
    assert not await store.tasks.finish(
        task_id, incomplete_reason=None, input_tokens=1, output_tokens=1
    )
    assert (await store.tasks.get(task_id))["state"] == "cancelled"


async def test_cancel_racing_completion_has_one_winner(store: Store) -> None:
    """Cancel and finish at the same moment: either completed (cancel 409) or cancelled."""
    outcomes = set()
    for _ in range(20):
        task_id = await drive(store.tasks, TaskState.RUNNING)
        finish = store.tasks.finish(
            task_id, incomplete_reason=None, input_tokens=1, output_tokens=1
        )
        cancelled, finished = await asyncio.gather(
            store.tasks.cancel(task_id), finish, return_exceptions=True
        )
        if finished is True:
            assert isinstance(cancelled, LmspError) and cancelled.code == "task_not_cancellable"
            outcome = "completed"
        else:
            assert finished is False and cancelled["state"] == "cancelling"
            assert await store.tasks.confirm_cancelled(task_id)
            outcome = "cancelled"
        assert (await store.tasks.get(task_id))["state"] == outcome
        types = event_types(store.db.path, task_id)
        assert not ("response.completed" in types and "response.cancelled" in types)
        outcomes.add(outcome)
    check_invariants(store.db.path)
