"""The task state machine of LMSP 11.2: atomic create, compare-and-set transitions, events."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import TaskKind, TaskState
from lmsp_desktop.core.storage import creates as creates_module
from lmsp_desktop.core.storage import deltas as deltas_module
from lmsp_desktop.core.storage import tasks as task_store_module
from lmsp_desktop.core.storage.recovery import next_boot, recover
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask, TaskStore
from lmsp_desktop.core.views import TaskChange
from tests.support.store_helpers import (
    check_invariants,
    drive,
    dump,
    event_types,
    new_task,
    request,
)

ALL_STATES = list(TaskState)

# Which states each runner-side transition may start from (LMSP_API.md "Task states").
LEGAL_FROM: dict[str, set[TaskState]] = {
    "mark_loading": {TaskState.QUEUED},
    "mark_running": {TaskState.QUEUED, TaskState.LOADING},
    "append_deltas": {TaskState.RUNNING},
    "finish": {TaskState.RUNNING},
    "fail": {TaskState.QUEUED, TaskState.LOADING, TaskState.RUNNING},
    "confirm_cancelled": {TaskState.CANCELLING},
}
RESULT_STATE = {
    "mark_loading": TaskState.LOADING,
    "mark_running": TaskState.RUNNING,
    "append_deltas": TaskState.RUNNING,
    "finish": TaskState.COMPLETED,
    "fail": TaskState.FAILED,
    "confirm_cancelled": TaskState.CANCELLED,
}
LAST_EVENT = {
    "mark_loading": "response.loading",
    "mark_running": "response.content_part.added",
    "append_deltas": "response.output_text.delta",
    "finish": "response.completed",
    "fail": "response.failed",
    "confirm_cancelled": "response.cancelled",
}

TERMINAL_EVENTS = {
    "response.completed",
    "response.incomplete",
    "response.failed",
    "response.cancelled",
}


async def run_op(tasks: TaskStore, op: str, task_id: str) -> Any:
    if op == "append_deltas":
        return await tasks.append_deltas(
            task_id, ["x"], output_tokens=9, input_tokens=3, snapshot={"tokens": [9]}
        )
    if op == "finish":
        return await tasks.finish(task_id, incomplete_reason=None, input_tokens=3, output_tokens=9)
    if op == "fail":
        return await tasks.fail(task_id, "engine_error", "boom")
    return await getattr(tasks, op)(task_id)


def fresh_read(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    """Read through a connection of its own: sees only what was committed."""
    conn = sqlite3.connect(store.db.path)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


async def test_create_commits_task_and_created_event_before_returning(store: Store) -> None:
    result = await store.tasks.create(new_task())
    assert result.status == 202 and not result.replayed
    assert result.body["status"] == "queued"
    assert result.body["task"]["last_sequence_number"] == 1
    assert result.body["task"]["queue_position"] == 1
    (task,) = fresh_read(store, "SELECT state, last_seq FROM tasks WHERE id=?", (result.task_id,))
    assert (task["state"], task["last_seq"]) == ("queued", 1)
    events = fresh_read(
        store, "SELECT seq, type, data FROM task_events WHERE task_id=?", (result.task_id,)
    )
    assert [(e["seq"], e["type"]) for e in events] == [(1, "response.created")]
    created = json.loads(events[0]["data"])
    assert created["response"]["id"] == result.task_id
    assert created["response"]["status"] == "queued"
    check_invariants(store.db.path)


async def test_sync_and_stream_creates_answer_200(store: Store) -> None:
    for mode in ("sync", "stream"):
        result = await store.tasks.create(new_task(mode=mode))
        assert result.status == 200
        assert (await store.tasks.get(result.task_id))["mode"] == mode


@pytest.mark.parametrize(
    "spec",
    [
        new_task(),
        new_task(mode="stream", client_id="client_a", on_restart="resume"),
        NewTask(
            model="m",
            request=request(
                tools=[{"name": "f", "parameters": {}}], metadata={"k": "v"}, store=False
            ),
            kind=TaskKind.EMBEDDING,
        ),
    ],
)
async def test_created_body_is_the_stored_response(store: Store, spec: NewTask) -> None:
    """The 202 body is built from what the create wrote, not read back: it must be what a
    read right after gives, and what the `response.created` event carries."""
    created = await store.tasks.create(spec)
    stored = await store.tasks.response_object(created.task_id)
    assert created.body == stored
    assert created.body_json is not None and json.loads(created.body_json) == stored
    [event] = await store.tasks.events(created.task_id)
    assert event == {"type": "response.created", "response": stored, "sequence_number": 1}


async def test_a_finished_task_stores_the_response_its_last_event_carries(store: Store) -> None:
    """The stored response (11.1 `responses`: the task's row, as a read gives it) is the
    object the closing event carries, however the task ended: by the runner, a cancel, or
    recovery."""
    ended = [
        await drive(store.tasks, state)
        for state in (TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.FAILED)
    ]
    ended.append(await drive(store.tasks, TaskState.CANCELLED))
    cancelling = await drive(store.tasks, TaskState.CANCELLING)
    assert await store.tasks.confirm_cancelled(cancelling)
    left_running = await drive(store.tasks, TaskState.RUNNING)
    await recover(store.tasks, await next_boot(store.tasks))  # policy fail: failed
    for task_id in [*ended, cancelling, left_running]:
        last = (await store.tasks.events(task_id))[-1]
        stored = await store.tasks.response_object(task_id)
        assert last["type"] in TERMINAL_EVENTS and last["response"] == stored, task_id


async def test_an_end_before_any_output_keeps_the_prompt_length_it_is_given(
    store: Store,
) -> None:
    """A generation failed, or cancelled, before its first output token: the prompt's length
    the runner hands fail / confirm_cancelled (no output commit stored it) is in the task's
    response and in the usage its closing event carries; an end without one leaves the
    stored count as it was."""
    failed, cancelled = [await drive(store.tasks, TaskState.LOADING) for _ in range(2)]
    for task_id in (failed, cancelled):
        assert await store.tasks.mark_running(task_id)
    await store.tasks.cancel(cancelled)
    assert await store.tasks.fail(failed, "engine_error", "it broke", input_tokens=60)
    assert await store.tasks.confirm_cancelled(cancelled, input_tokens=70)
    kept = await drive(store.tasks, TaskState.RUNNING)  # its deltas stored 3
    assert await store.tasks.fail(kept, "engine_error", "it broke")
    for task_id, length in ((failed, 60), (cancelled, 70), (kept, 3)):
        stored = await store.tasks.response_object(task_id)
        last = (await store.tasks.events(task_id))[-1]
        assert last["type"] in TERMINAL_EVENTS and last["response"] == stored
        assert stored["usage"]["input_tokens"] == length, task_id
    assert (await store.tasks.response_object(failed))["error"]["code"] == "engine_error"


async def test_create_is_all_or_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_event(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk gone mid-transaction")

    # After the response and task rows are written, before the event.
    monkeypatch.setattr(creates_module, "created_event_row", broken_event)
    with pytest.raises(RuntimeError):
        await store.tasks.create(new_task())
    assert fresh_read(store, "SELECT * FROM tasks") == []
    assert fresh_read(store, "SELECT * FROM responses") == []


async def test_listeners_hear_only_after_commit(store: Store) -> None:
    heard: list[tuple[TaskChange, list[sqlite3.Row]]] = []

    def listener(change: TaskChange) -> None:
        rows = fresh_read(store, "SELECT state, last_seq FROM tasks WHERE id=?", (change.task_id,))
        heard.append((change, rows))

    store.tasks.listeners.append(listener)
    task_id = await drive(store.tasks, TaskState.RUNNING)
    assert [c.state for c, _ in heard] == ["queued", "loading", "running", "running"]
    for change, rows in heard:
        # The change a listener hears is already visible to every other connection.
        assert rows[0]["state"] == change.state and rows[0]["last_seq"] == change.last_seq
    assert heard[-1][0].task_id == task_id


async def test_a_failing_listener_does_not_undo_or_hide_a_committed_change(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    later: list[TaskChange] = []

    def broken(change: TaskChange) -> None:
        raise ValueError("listener bug")

    store.tasks.listeners.extend([broken, later.append])
    task_id = await store.tasks.create(new_task())
    assert await store.tasks.mark_loading(task_id.task_id)
    assert (await store.tasks.get(task_id.task_id))["state"] == "loading"
    assert [c.state for c in later] == ["queued", "loading"]
    assert "listener bug" in caplog.text  # logged with its traceback, not swallowed


@pytest.mark.parametrize("start", ALL_STATES, ids=str)
@pytest.mark.parametrize("op", list(LEGAL_FROM))
async def test_every_transition_is_compare_and_set(store: Store, op: str, start: TaskState) -> None:
    task_id = await drive(store.tasks, start)
    before = dump(store.db.path)
    last_seq = (await store.tasks.get(task_id))["last_seq"]
    result = await run_op(store.tasks, op, task_id)
    if start in LEGAL_FROM[op]:
        assert result, f"{op} from {start} must succeed"
        row = await store.tasks.get(task_id)
        assert row["state"] == RESULT_STATE[op]
        assert row["last_seq"] > last_seq
        assert event_types(store.db.path, task_id)[-1] == LAST_EVENT[op]
    else:
        assert not result, f"{op} from {start} must be refused"
        assert dump(store.db.path) == before, f"a refused {op} from {start} wrote something"
    check_invariants(store.db.path)


async def test_unknown_task_transitions_are_refused(store: Store) -> None:
    for op in LEGAL_FROM:
        assert not await run_op(store.tasks, op, "resp_nope")


async def test_running_opens_a_new_item_and_deltas_carry_it(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.LOADING)
    item_id = await store.tasks.mark_running(task_id)
    assert item_id and item_id.startswith("msg_")
    assert event_types(store.db.path, task_id) == [
        "response.created",
        "response.loading",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert await store.tasks.append_deltas(
        task_id, ["a", "b"], output_tokens=2, input_tokens=1, snapshot={"tokens": [1, 2]}
    )
    deltas = [e for e in await store.tasks.events(task_id) if e["type"].endswith(".delta")]
    assert [(d["delta"], d["item_id"]) for d in deltas] == [("a", item_id), ("b", item_id)]


async def test_queued_task_with_loaded_model_runs_without_loading_event(store: Store) -> None:
    task_id = (await store.tasks.create(new_task())).task_id
    assert await store.tasks.mark_running(task_id)
    assert "response.loading" not in event_types(store.db.path, task_id)


async def test_snapshot_is_committed_with_the_deltas_it_covers(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.RUNNING)
    snapshot = {"tokens": [1, 2, 3, 4], "rng": 7}
    assert await store.tasks.append_deltas(
        task_id, [" wor", "ld"], output_tokens=4, input_tokens=3, snapshot=snapshot
    )
    (row,) = fresh_read(
        store,
        "SELECT t.snapshot, t.last_seq, r.output_text, r.output_tokens FROM tasks t "
        "JOIN responses r ON r.id=t.id WHERE t.id=?",
        (task_id,),
    )
    assert json.loads(row["snapshot"]) == snapshot
    assert row["output_text"] == "Hello world"
    assert row["output_tokens"] == 4
    assert event_types(store.db.path, task_id)[-2:] == ["response.output_text.delta"] * 2
    check_invariants(store.db.path)


async def test_snapshot_and_deltas_fail_together(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = await drive(store.tasks, TaskState.RUNNING)
    before = dump(store.db.path)

    def broken_events(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("crash between snapshot and deltas")

    # Called once the snapshot, last_seq and text are updated, before the events are written.
    monkeypatch.setattr(deltas_module, "numbered_deltas", broken_events)
    with pytest.raises(RuntimeError):
        await store.tasks.append_deltas(
            task_id, ["!"], output_tokens=3, input_tokens=3, snapshot={"tokens": [1, 2, 3]}
        )
    assert dump(store.db.path) == before


async def test_an_appender_is_answered_even_when_publishing_its_commit_fails(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deltas committed; a failure while telling the listeners must not leave the
    generating task waiting for ever on its append (it would stop streaming silently)."""
    task_id = await drive(store.tasks, TaskState.RUNNING)
    loop = asyncio.get_running_loop()
    failures: list[str] = []
    loop.set_exception_handler(lambda _loop, context: failures.append(context["message"]))

    def broken_change(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a change that cannot be built")

    monkeypatch.setattr(task_store_module, "DeltaEvents", broken_change)
    try:
        appended = await asyncio.wait_for(
            store.tasks.append_deltas(
                task_id, ["!"], output_tokens=3, input_tokens=3, snapshot=None
            ),
            timeout=30,  # a bound for the failure case only: answered at once otherwise
        )
    finally:
        loop.set_exception_handler(None)
    assert appended  # committed: the text is there
    assert (await store.tasks.get(task_id))["output_text"].endswith("!")
    assert failures  # and the failure was reported, not swallowed


async def test_deltas_after_cancel_are_refused_and_not_persisted(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.RUNNING)
    await store.tasks.cancel(task_id)
    before = dump(store.db.path)
    assert not await store.tasks.append_deltas(
        task_id, ["late"], output_tokens=9, input_tokens=3, snapshot={"tokens": [9]}
    )
    assert dump(store.db.path) == before
    assert "late" not in (await store.tasks.get(task_id))["output_text"]


async def test_finish_closes_the_item_and_stores_the_response(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.COMPLETED)
    assert event_types(store.db.path, task_id)[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    body = await store.tasks.response_object(task_id)
    assert body["status"] == "completed" and body["output_text"] == "Hello"
    assert body["output"][0]["content"][0]["text"] == "Hello"
    (stored,) = fresh_read(
        store, "SELECT data FROM task_events WHERE task_id=? ORDER BY seq DESC LIMIT 1", (task_id,)
    )
    assert json.loads(stored["data"])["response"] == body


async def test_finish_with_a_reason_is_incomplete(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.INCOMPLETE)
    body = await store.tasks.response_object(task_id)
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_fail_records_the_error_code(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.FAILED)
    body = await store.tasks.response_object(task_id)
    assert body["status"] == "failed" and body["error"]["code"] == "engine_error"


@pytest.mark.parametrize("state", sorted(TaskState), ids=str)
async def test_delete_only_finished(store: Store, state: TaskState) -> None:
    task_id = await drive(store.tasks, state)
    keep = await drive(store.tasks, TaskState.COMPLETED)
    if state in (TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.FAILED, TaskState.CANCELLED):
        await store.tasks.delete(task_id)
        for table, column in (("tasks", "id"), ("responses", "id"), ("task_events", "task_id")):
            assert fresh_read(store, f"SELECT 1 FROM {table} WHERE {column}=?", (task_id,)) == []
        assert (await store.tasks.get(keep))["state"] == "completed"
    else:
        before = dump(store.db.path)
        with pytest.raises(LmspError) as caught:
            await store.tasks.delete(task_id)
        assert caught.value.status == 409 and caught.value.code == "task_not_finished"
        assert dump(store.db.path) == before
    check_invariants(store.db.path)


async def test_delete_unknown_or_someone_elses_is_404(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.COMPLETED, client_id="client_a")
    for tid, client in (("resp_nope", None), (task_id, "client_b")):
        with pytest.raises(LmspError) as caught:
            await store.tasks.delete(tid, client)
        assert caught.value.status == 404
    await store.tasks.delete(task_id, "client_a")


async def test_get_hides_other_clients_tasks(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.QUEUED, client_id="client_a")
    assert (await store.tasks.get(task_id, "client_a"))["id"] == task_id
    assert (await store.tasks.get(task_id))["id"] == task_id  # admin / GUI
    with pytest.raises(LmspError) as caught:
        await store.tasks.get(task_id, "client_b")
    assert caught.value.status == 404


async def test_events_page_after_a_sequence_number(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.COMPLETED)
    everything = await store.tasks.events(task_id)
    assert [e["sequence_number"] for e in everything] == list(range(1, len(everything) + 1))
    page = await store.tasks.events(task_id, after=3, limit=2)
    assert [e["sequence_number"] for e in page] == [4, 5]
    rows = await store.tasks.event_rows(task_id, after=len(everything) - 1)
    assert [r["type"] for r in rows] == ["response.completed"]


async def test_events_keep_what_a_request_carries_exactly(store: Store) -> None:
    """An event's JSON is written by orjson, which refuses integers past 64 bits (a tool's
    schema may hold one): such a task's events are still written, every value exact, and
    non-ASCII text survives as it was."""
    tool = {
        "name": "pick",
        "description": "Choisir une étoile ✨",
        "parameters": {"type": "object", "properties": {"n": {"maximum": 10**30}}},
    }
    created = await store.tasks.create(
        NewTask(model="m", request=request(tools=[tool], instructions="Réponds en français"))
    )
    assert await store.tasks.mark_loading(created.task_id)
    assert await store.tasks.fail(created.task_id, "engine_error", "boom")
    for event in (await store.tasks.events(created.task_id))[1:]:  # the ones stored by moves
        assert event["response"]["tools"] == [{"type": "function", **tool}]
        assert event["response"]["instructions"] == "Réponds en français"
    final = await store.tasks.response_object(created.task_id)
    assert final["tools"][0]["parameters"]["properties"]["n"]["maximum"] == 10**30
