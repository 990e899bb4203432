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

import aiohttp
import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.engines.base import GenerationRequest
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.follow import EventFollower
from lmsp_desktop.core.runner import Runner, SnapshotTokens
from lmsp_desktop.core.storage import db as db_module
from lmsp_desktop.core.storage.clients import create_client
from lmsp_desktop.core.storage.events import DELTA
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.unit.core.test_engine_fake import MESSAGES, Collector

MODEL = "smollm2-135m-instruct"  # the demo model, here run by the fake engine
USER_SCOPES = ("models:read", "responses:read", "responses:write")
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


async def test_tokens_of_an_interval_do_not_wake_the_loop() -> None:
    """After a hand-over the loop side sleeps out the interval instead of waiting for the
    next token: the thread (in a worker process, the decoding thread) wakes it for the first
    token and for the end only, however many tokens the interval holds."""
    loop = asyncio.get_running_loop()
    hops = 0
    original = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        if threading.current_thread() is not threading.main_thread():
            hops += 1
        return original(*args, **kwargs)

    engine = FakeEngine(tokens=TOKENS)
    engine.gate = threading.Semaphore(0)
    model = await engine.load(Path("fake.gguf"))
    sink = Collector()
    # An hour-long interval: the rest can only go at the end of the generation.
    request = GenerationRequest(MESSAGES, sink_interval=3600.0)
    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        generation = asyncio.create_task(model.generate(request, sink))
        engine.gate.release(1)
        await until(lambda: len(sink.batches) == 1)
        engine.gate.release(len(TOKENS) - 1)
        await asyncio.wait_for(generation, HANG)
    finally:
        del loop.call_soon_threadsafe
    assert [p.text for p in sink.pieces] == TOKENS
    assert [len(b) for b in sink.batches] == [1, len(TOKENS) - 1]
    assert hops <= 3  # the first token, the end, the thread returning (asyncio.to_thread)


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


class CommitGate:
    """A double of the store's commit: while closed, every group of writes runs its work and
    then waits in the writer thread, inside its transaction, before COMMIT (a slow fsync
    made as slow as the test likes). Installed in place of storage.db._run_group."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.open.set()
        self.holding = threading.Event()  # a transaction is waiting at its COMMIT
        self.held_deltas = 0  # delta events the held transaction holds, committed or not
        original = db_module._run_group

        def hold(conn: sqlite3.Connection) -> None:
            if self.open.is_set():
                return
            self.held_deltas = conn.execute(
                "SELECT COUNT(*) FROM task_events WHERE type=?", (DELTA,)
            ).fetchone()[0]
            self.holding.set()
            self.open.wait(HANG)  # a bound on a hang: the test fails waiting, not here
            self.holding.clear()

        def run_group(conn: sqlite3.Connection, works: list[Any]) -> list[tuple[bool, Any]]:
            # The hold is one more unit of work, the last before COMMIT; its outcome is not
            # the callers'.
            return original(conn, [*works, hold])[:-1]

        monkeypatch.setattr(db_module, "_run_group", run_group)


async def test_nothing_reaches_a_reader_while_its_commit_is_held(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule 11.2 made deterministic: the commit of a group of deltas is held open, and the
    follower (what every SSE stream sends from) yields none of them until it is released;
    then every one arrives, exactly as committed."""
    gate = CommitGate(monkeypatch)
    engine = FakeEngine(tokens=TOKENS)
    engine.gate = threading.Semaphore(0)
    follower = EventFollower(store.tasks)
    outside = sqlite3.connect(store.db.path)  # sees only what is committed

    def committed_deltas() -> int:
        return int(
            outside.execute("SELECT COUNT(*) FROM task_events WHERE type=?", (DELTA,)).fetchone()[0]
        )

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

    def deltas_seen() -> list[str]:
        return [e["delta"] for e in seen if e["type"] == DELTA]

    committed: list[int] = []  # tokens per append_deltas that returned (committed)
    append = store.tasks.append_deltas

    async def counted(task_id: str, deltas: Any, **kwargs: Any) -> bool:
        done = await append(task_id, deltas, **kwargs)
        committed.append(len(deltas))
        return done

    store.tasks.append_deltas = counted  # type: ignore[method-assign]
    try:
        async with started(Runner(store.tasks, Paths(), engine)):
            reader = asyncio.create_task(read())
            engine.gate.release(1)
            await until(lambda: deltas_seen() == TOKENS[:1], what="the first delta")
            gate.open.clear()  # from now on every commit waits for the test
            engine.gate.release(len(TOKENS))
            await until(
                lambda: gate.holding.is_set() and gate.held_deltas > 1,
                what="a held commit with more deltas",
            )
            held = gate.held_deltas
            for _ in range(200):  # let the reader run: nothing is for it yet
                await asyncio.sleep(0)
            assert deltas_seen() == TOKENS[:1] and uncommitted == []
            assert committed_deltas() == sum(committed) == 1 < held
            gate.open.set()
            await asyncio.wait_for(reader, HANG)
    finally:
        gate.open.set()
        outside.close()
    assert uncommitted == []
    assert deltas_seen() == TOKENS  # one event per token, the exact text, after the release
    assert sum(committed) == len(TOKENS)  # each token committed once
    assert [e["sequence_number"] for e in seen] == list(range(1, len(seen) + 1))
    assert seen == await store.tasks.events(task_id)
    row = await store.tasks.get(task_id)
    assert row["state"] == "completed" and row["output_text"] == "".join(TOKENS)


def deltas_in(stream: bytes) -> list[str]:
    """The delta texts of the complete SSE events received so far."""
    texts = []
    for block in stream.split(b"\n\n")[:-1]:  # the last piece may be an unfinished event
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                event = json.loads(line[len(b"data: ") :])
                if event.get("type") == DELTA:
                    texts.append(event["delta"])
    return texts


async def test_an_sse_client_gets_nothing_while_the_commit_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through the real service: a streaming POST /v1/responses over loopback
    receives no delta of a held commit, and all of them once it is released."""
    gate = CommitGate(monkeypatch)
    engine = FakeEngine(tokens=TOKENS)
    engine.gate = threading.Semaphore(0)
    received = bytearray()
    async with started(Core(tmp_path / "data", port=0, engine=engine)) as core:
        _, token = await create_client(core.store.db, "reader", frozenset(USER_SCOPES))
        headers = {"Authorization": f"Bearer {token}"}
        body = {"model": MODEL, "input": "hi", "stream": True}
        async with (
            aiohttp.ClientSession(base_url=core.url) as http,
            http.post("/v1/responses", json=body, headers=headers) as answer,
        ):
            assert answer.status == 200, await answer.text()

            async def read() -> None:
                async for chunk in answer.content.iter_any():
                    received.extend(chunk)

            reading = asyncio.create_task(read())
            try:
                engine.gate.release(1)
                await until(lambda: deltas_in(received) == TOKENS[:1], what="the first delta")
                gate.open.clear()
                engine.gate.release(len(TOKENS))
                await until(
                    lambda: gate.holding.is_set() and gate.held_deltas > 1,
                    what="a held commit with more deltas",
                )
                for _ in range(200):  # the server and the client run: nothing is to be sent
                    await asyncio.sleep(0)
                assert deltas_in(received) == TOKENS[:1]
                gate.open.set()
                await asyncio.wait_for(reading, HANG)
            finally:
                gate.open.set()
                reading.cancel()
    assert deltas_in(received) == TOKENS
    assert b"event: response.completed" in received
