"""Listing tasks: newest first, paged by an `after` cursor, filtered; queue positions."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import create, drive, new_task


async def test_list_is_newest_first_and_pages_with_after(store: Store) -> None:
    ids = [await create(store.tasks) for _ in range(7)]
    newest_first = ids[::-1]
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        rows, has_more = await store.tasks.list(limit=3, after=after)
        seen.extend(r["id"] for r in rows)
        pages += 1
        if not has_more:
            break
        after = rows[-1]["id"]
    assert seen == newest_first
    assert pages == 3
    rows, has_more = await store.tasks.list(limit=7)
    assert [r["id"] for r in rows] == newest_first and has_more is False


async def test_list_filters_by_state_model_and_client(store: Store) -> None:
    a_running = await drive(store.tasks, TaskState.RUNNING, model="a", client_id="client_1")
    a_queued = await drive(store.tasks, TaskState.QUEUED, model="a", client_id="client_2")
    b_done = await drive(store.tasks, TaskState.COMPLETED, model="b", client_id="client_1")

    async def ids(**filters: object) -> list[str]:
        rows, _ = await store.tasks.list(**filters)  # type: ignore[arg-type]
        return [r["id"] for r in rows]

    assert await ids(states=["queued"]) == [a_queued]
    assert await ids(states=["running", "completed"]) == [b_done, a_running]
    assert await ids(model="a") == [a_queued, a_running]
    assert await ids(client_id="client_1") == [b_done, a_running]
    assert await ids(model="a", states=["running"], client_id="client_1") == [a_running]
    assert await ids(model="c") == []


async def test_list_filters_apply_across_pages(store: Store) -> None:
    wanted = [await create(store.tasks, model="a") for _ in range(4)]
    for _ in range(4):
        await create(store.tasks, model="b")
    first, more = await store.tasks.list(model="a", limit=2)
    second, more2 = await store.tasks.list(model="a", limit=2, after=first[-1]["id"])
    assert more and not more2
    assert [r["id"] for r in first + second] == wanted[::-1]


async def test_list_after_an_unknown_id_is_a_clear_error(store: Store) -> None:
    with pytest.raises(LmspError) as caught:
        await store.tasks.list(after="resp_gone")
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
