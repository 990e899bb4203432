"""Following a task's events: committed text deltas reach a caught-up reader from the
store's notification (no read back per token), and what it yields is exactly the log."""

from __future__ import annotations

import asyncio
from typing import Any

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.follow import EventFollower
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask


async def running_task(store: Store) -> str:
    request = parse_create({"model": "m", "input": "hi"}, "fail")
    created = await store.tasks.create(
        NewTask(model="m", request=request, on_restart=request["on_restart"])
    )
    assert await store.tasks.mark_running(created.task_id)
    return created.task_id


class CountingReads:
    """Counts the follower's reads of the event log."""

    def __init__(self, store: Store) -> None:
        self.calls = 0
        self._events = store.tasks.events

        async def events(task_id: str, after: int = 0, limit: int = 1000) -> Any:
            self.calls += 1
            return await self._events(task_id, after, limit)

        store.tasks.events = events  # type: ignore[method-assign]


async def test_streamed_deltas_come_from_the_commit_and_equal_the_log(store: Store) -> None:
    task_id = await running_task(store)
    follower = EventFollower(store.tasks)
    reads = CountingReads(store)
    seen: list[dict[str, Any]] = []
    caught_up = asyncio.Event()

    async def follow() -> None:
        async for event in follower.follow(task_id):
            seen.append(event)
            caught_up.set()

    reader = asyncio.create_task(follow())
    await caught_up.wait()  # replayed what was there (created, in_progress, item added…)
    reads_before = reads.calls
    for i in range(40):
        assert await store.tasks.append_deltas(
            task_id, [f" w{i}", "!"], output_tokens=2 * i + 2, input_tokens=3, snapshot=None
        )
        await asyncio.sleep(0)  # let the reader take them as a client would
    assert await store.tasks.finish(
        task_id, incomplete_reason=None, output_tokens=80, input_tokens=3
    )
    await asyncio.wait_for(reader, 10)
    assert seen == await store.tasks.events(task_id)  # every event, in order, as committed
    assert [e["sequence_number"] for e in seen] == list(range(1, len(seen) + 1))
    # 40 commits of deltas, yet the log was read only for the events that carry none.
    assert reads.calls - reads_before <= 3


async def test_a_reader_that_falls_behind_reads_the_gap_from_the_log(store: Store) -> None:
    task_id = await running_task(store)
    follower = EventFollower(store.tasks)
    for i in range(5):
        await store.tasks.append_deltas(
            task_id, [f"a{i}"], output_tokens=i + 1, input_tokens=1, snapshot=None
        )
    seen: list[dict[str, Any]] = []

    async def follow() -> None:
        async for event in follower.follow(task_id, after=2):
            seen.append(event)

    reader = asyncio.create_task(follow())
    for i in range(5):  # committed while the reader is still replaying
        await store.tasks.append_deltas(
            task_id, [f"b{i}"], output_tokens=6 + i, input_tokens=1, snapshot=None
        )
    await store.tasks.finish(task_id, incomplete_reason=None, output_tokens=10, input_tokens=1)
    await asyncio.wait_for(reader, 10)
    assert seen == (await store.tasks.events(task_id))[2:]


async def test_awkward_text_streams_and_replays_the_same(store: Store) -> None:
    """Quotes, backslashes, control characters, non-ASCII and emoji: what a follower hears
    from the commit and what a reconnecting client replays from the log are the same text
    (the log's JSON is put together by hand on this hot path, events.numbered_deltas)."""
    task_id = await running_task(store)
    heard: list[dict[str, Any]] = []
    store.tasks.listeners.append(lambda change: heard.extend(change.events))
    deltas = ['say "hi"', "a\\b", "\n\t\x00\x1f", "é ñ 中文", "😀", "\u2028\u2029", "</script>"]
    assert await store.tasks.append_deltas(
        task_id, deltas, output_tokens=7, input_tokens=1, snapshot=None
    )
    replayed = [e for e in await store.tasks.events(task_id) if e["type"].endswith(".delta")]
    assert [e["delta"] for e in replayed] == deltas
    assert heard == replayed
    row = await store.tasks.get(task_id)
    assert row["output_text"] == "".join(deltas)
