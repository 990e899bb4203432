"""Listing tasks: newest first, paged by an `after` cursor, filtered; queue positions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.api.resource import task_object
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.recovery import next_boot, recover
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.views import TaskFilter, TaskRow
from tests.support.store_helpers import create, drive, new_task, request


async def listed(store: Store, flt: TaskFilter) -> list[TaskRow]:
    """The window's first page for `flt`, as Core.task_page reads it."""
    return [TaskRow.of(row) for row in await store.tasks.page(flt, 0, 10, "id", True)]


async def test_list_is_newest_first_and_pages_with_after(store: Store) -> None:
    ids = [await create(store.tasks) for _ in range(7)]
    newest_first = ids[::-1]
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        rows, has_more = await store.tasks.list_tasks(TaskFilter(), limit=3, after=after)
        seen.extend(r["id"] for r in rows)
        pages += 1
        if not has_more:
            break
        after = rows[-1]["id"]
    assert seen == newest_first
    assert pages == 3
    rows, has_more = await store.tasks.list_tasks(TaskFilter(), limit=7)
    assert [r["id"] for r in rows] == newest_first and has_more is False


async def test_list_filters_by_state_model_and_client(store: Store) -> None:
    a_running = await drive(store.tasks, TaskState.RUNNING, model="a", client_id="client_1")
    a_queued = await drive(store.tasks, TaskState.QUEUED, model="a", client_id="client_2")
    b_done = await drive(store.tasks, TaskState.COMPLETED, model="b", client_id="client_1")

    async def ids(**filters: Any) -> list[str]:
        rows, _ = await store.tasks.list_tasks(TaskFilter(**filters))
        return [r["id"] for r in rows]

    assert await ids(states=("queued",)) == [a_queued]
    assert await ids(states=("running", "completed")) == [b_done, a_running]
    assert await ids(model="a") == [a_queued, a_running]
    assert await ids(client_id="client_1") == [b_done, a_running]
    assert await ids(model="a", states=("running",), client_id="client_1") == [a_running]
    assert await ids(model="c") == []


async def test_list_filters_apply_across_pages(store: Store) -> None:
    wanted = [await create(store.tasks, model="a") for _ in range(4)]
    for _ in range(4):
        await create(store.tasks, model="b")
    first, more = await store.tasks.list_tasks(TaskFilter(model="a"), limit=2)
    second, more2 = await store.tasks.list_tasks(
        TaskFilter(model="a"), limit=2, after=first[-1]["id"]
    )
    assert more and not more2
    assert [r["id"] for r in first + second] == wanted[::-1]


async def test_list_after_an_unknown_id_is_a_clear_error(store: Store) -> None:
    with pytest.raises(LmspError) as caught:
        await store.tasks.list_tasks(TaskFilter(), after="resp_gone")
    # An unknown id, like any unknown id of the contract, is a 404 naming the parameter.
    assert caught.value.status == 404 and caught.value.param == "after"


async def test_queue_position_is_one_based_and_moves_up(store: Store) -> None:
    ids = [await create(store.tasks) for _ in range(3)]
    positions = [(await store.tasks.response_object(i))["task"]["queue_position"] for i in ids]
    assert positions == [1, 2, 3]
    assert await store.tasks.mark_loading(ids[0])
    await store.tasks.cancel(ids[1])
    objects = [await store.tasks.response_object(i) for i in ids]
    assert [o["task"]["queue_position"] for o in objects] == [None, None, 1]


async def test_created_body_reports_its_queue_position(store: Store) -> None:
    first = await store.tasks.create(new_task())
    second = await store.tasks.create(new_task())
    assert first.body["task"]["queue_position"] == 1
    assert second.body["task"]["queue_position"] == 2


async def test_created_body_counts_the_queue_through_moves_recovery_and_reopening(
    data_dir: Path,
) -> None:
    """The 202's queue position comes from the writer's running count of each model's queue
    (not a COUNT per create): after tasks leave and rejoin the queue, are deleted, are
    requeued by recovery, or the store is reopened, a new task still sees its true place."""
    store = Store(data_dir)
    await store.open()
    try:
        queued_a = [await create(store.tasks, model="a") for _ in range(3)]
        await create(store.tasks, model="b")
        assert await store.tasks.mark_loading(queued_a[0])  # leaves the queue
        await store.tasks.cancel(queued_a[1])  # leaves it for good
        await store.tasks.delete(queued_a[1])
        retried = await drive(store.tasks, TaskState.RUNNING, model="a", on_restart="retry")
        assert (await store.tasks.create(new_task(model="a"))).body["task"]["queue_position"] == 2
    finally:
        await store.close()
    store = Store(data_dir)
    await store.open()
    try:
        # Table 11.3: the queued and loading tasks (policy fail) fail, `retried` is queued.
        await recover(store.tasks, await next_boot(store.tasks))
        assert (await store.tasks.get(retried))["state"] == TaskState.QUEUED
        for model in ("a", "b", "c"):
            created = await store.tasks.create(new_task(model=model))
            stored = await store.tasks.response_object(created.task_id)
            assert created.body["task"]["queue_position"] == stored["task"]["queue_position"]
        positions = [
            (await store.tasks.create(new_task(model=m))).body["task"]["queue_position"]
            for m in ("a", "b", "c")
        ]
        # a: `retried`, this loop's task, this one; b and c: the loop's task, this one.
        assert positions == [3, 2, 2]
    finally:
        await store.close()


async def test_filter_text_matches_percent_and_underscore_literally(store: Store) -> None:
    """The window's search box: `%` and `_` are characters to find, not LIKE wildcards."""
    other = await create(store.tasks, model="aXb")
    underscored = await create(store.tasks, model="a_b")
    percent = await create(store.tasks, model="a%b")

    async def found(text: str) -> set[str]:
        rows, _ = await store.tasks.list_tasks(TaskFilter(text=text), limit=100)
        return {r["id"] for r in rows}

    assert await found("a_b") == {underscored}
    assert await found("a%b") == {percent}
    assert await found("aXb") == {other}
    assert await found("a\\b") == set()
    assert [r.id for r in await listed(store, TaskFilter(text="a_b"))] == [underscored]


async def test_the_api_list_and_the_window_page_share_queue_positions(store: Store) -> None:
    ids = [await create(store.tasks, model="m") for _ in range(3)]
    await store.tasks.mark_loading(ids[0])
    rows, _ = await store.tasks.list_tasks(TaskFilter(), limit=10)
    assert {r["id"]: r["queue_position"] for r in rows} == {ids[0]: None, ids[1]: 1, ids[2]: 2}
    page = await listed(store, TaskFilter())
    assert {r.id: r.queue_position for r in page} == {ids[0]: None, ids[1]: 1, ids[2]: 2}


async def test_a_listed_task_object_equals_the_task_object_of_one_task(store: Store) -> None:
    """`GET /v1/tasks` (the list query) and `GET /v1/tasks/{id}` show the same task object,
    dropped tools and queue position included."""
    spec = new_task()
    spec.request = request(dropped_tools=["web_search"])
    dropping = (await store.tasks.create(spec)).task_id
    plain = await create(store.tasks)
    rows, _ = await store.tasks.list_tasks(TaskFilter(), limit=10)
    for row in rows:
        one = await store.tasks.get(row["id"])
        assert task_object(row, row["queue_position"]) == task_object(
            one, await store.tasks.queue_position(one)
        )
    assert {r["id"] for r in rows} == {dropping, plain}
    assert task_object(rows[-1])["dropped_tools"] == ["web_search"]
