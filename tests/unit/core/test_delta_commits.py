"""The streaming hot path (issue 15, B3): tokens reach the store in few commits and the
event loop in few thread hops, yet nothing is shown before it is committed (rule 11.2) and
the committed deltas reassemble the exact text, one event per token."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines.base import GenerationRequest
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.follow import EventFollower
from lmsp_desktop.core.requests import parse_create
from lmsp_desktop.core.runner import Runner, SnapshotTokens
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.unit.core.test_engine_fake import MESSAGES, Collector

HANG = 60.0  # a bound on a hang, not a timing assertion
TOKENS = [f" w{i}" for i in range(40)]


class Paths:
    async def path_for_run(self, model_id: str) -> Path:
        return Path(f"/models/{model_id}.gguf")


async def test_tokens_faster_than_the_interval_are_handed_over_together() -> None:
    model = await FakeEngine(tokens=TOKENS, token_delay=0.002).load(Path("fake.gguf"))
    sink = Collector()  # instant: without the interval every token would go alone
    request = GenerationRequest(MESSAGES, sink_interval=0.05)
    result = await asyncio.wait_for(model.generate(request, sink), HANG)
    assert result.finish_reason == "stop"
    assert [p.text for p in sink.pieces] == TOKENS  # every token, in order, once
    assert len(sink.batches) < len(TOKENS) / 2


async def test_the_end_of_a_generation_is_not_held_back_by_the_interval() -> None:
    model = await FakeEngine(tokens=TOKENS[:5]).load(Path("fake.gguf"))
    sink = Collector()
    # An hour-long interval: only the end of the generation can release the last tokens.
    request = GenerationRequest(MESSAGES, sink_interval=3600.0)
    result = await asyncio.wait_for(model.generate(request, sink), HANG)
    assert result.finish_reason == "stop"
    assert [p.text for p in sink.pieces] == TOKENS[:5]


async def test_a_cancel_is_not_held_back_by_the_interval() -> None:
    engine = FakeEngine(tokens=TOKENS)
    engine.gate = threading.Semaphore(0)
    model = await engine.load(Path("fake.gguf"))
    sink = Collector()
    request = GenerationRequest(MESSAGES, sink_interval=3600.0)
    generation = asyncio.create_task(model.generate(request, sink))
    engine.gate.release(2)
    await until(lambda: len(sink.pieces) >= 1)
    request.cancel.set()
    result = await asyncio.wait_for(generation, HANG)
    assert result.finish_reason == "cancelled"
    assert len(sink.pieces) <= 2


async def test_the_thread_wakes_the_loop_per_hand_over_not_per_token() -> None:
    loop = asyncio.get_running_loop()
    hops = 0
    original = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        if threading.current_thread() is not threading.main_thread():
            hops += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        model = await FakeEngine(tokens=TOKENS, token_delay=0.002).load(Path("fake.gguf"))
        sink = Collector(delay=0.03)  # a commit in flight while tokens keep coming
        await asyncio.wait_for(model.generate(GenerationRequest(MESSAGES), sink), HANG)
    finally:
        del loop.call_soon_threadsafe
    assert [p.text for p in sink.pieces] == TOKENS
    # One hop per batch the loop side waited for (and one for the end), not one per token.
    assert hops <= len(sink.batches) + 2 < len(TOKENS)


def test_snapshot_tokens_encode_the_growing_list_as_json() -> None:
    tokens = [5, 6]
    snap = SnapshotTokens(tokens)
    assert json.loads(snap.snapshot({"seed": 7})) == {"tokens": [5, 6], "seed": 7}
    tokens.extend([8, 9])
    assert json.loads(snap.snapshot({"seed": 7, "held": 'a"b'})) == {
        "tokens": [5, 6, 8, 9],
        "seed": 7,
        "held": 'a"b',
    }
    tokens.append(10)
    assert json.loads(snap.snapshot({})) == {"tokens": [5, 6, 8, 9, 10]}
    assert json.loads(SnapshotTokens([]).snapshot({"seed": 1})) == {"tokens": [], "seed": 1}


async def test_every_delta_a_reader_sees_is_already_committed(store: Store) -> None:
    engine = FakeEngine(tokens=TOKENS)
    engine.gate = threading.Semaphore(0)
    commits: list[int] = []
    append = store.tasks.append_deltas

    async def counted(task_id: str, deltas: Any, **kwargs: Any) -> bool:
        commits.append(len(deltas))
        return await append(task_id, deltas, **kwargs)

    store.tasks.append_deltas = counted  # type: ignore[method-assign]
    follower = EventFollower(store.tasks)
    # Another connection sees only what is committed.
    outside = sqlite3.connect(store.db.path)
    request = parse_create({"model": "m", "input": "hi"}, "fail")
    created = await store.tasks.create(NewTask(model="m", request=request, on_restart="fail"))
    task_id = created.task_id
    seen: list[dict[str, Any]] = []
    uncommitted: list[int] = []

    async def read() -> None:
        async for event in follower.follow(task_id):
            row = outside.execute(
                "SELECT data FROM task_events WHERE task_id=? AND seq=?",
                (task_id, event["sequence_number"]),
            ).fetchone()
            if row is None or json.loads(row[0]) != event:
                uncommitted.append(event["sequence_number"])
            seen.append(event)

    try:
        async with started(Runner(store.tasks, Paths(), engine)):
            reader = asyncio.create_task(read())
            engine.gate.release(1)
            await until(lambda: sum(commits) == 1)
            engine.gate.release(len(TOKENS))  # the engine runs ahead of the commits
            await asyncio.wait_for(reader, HANG)
    finally:
        outside.close()
    assert uncommitted == []
    deltas = [e for e in seen if e["type"] == "response.output_text.delta"]
    assert [e["delta"] for e in deltas] == TOKENS  # one event per token, the exact text
    assert [e["sequence_number"] for e in seen] == list(range(1, len(seen) + 1))
    assert seen == await store.tasks.events(task_id)
    assert sum(commits) == len(TOKENS) and len(commits) < len(TOKENS) / 2
    row = await store.tasks.get(task_id)
    assert row["state"] == "completed" and row["output_text"] == "".join(TOKENS)
