"""A generation's finish is committed with its last deltas (B2): the engine's end comes with
its last tokens (pump, EndingSink), the runner hands the finish to the store with them, and
the store commits both in one transaction. A cancel committed before still wins whole."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.engines.base import (
    EndingSink,
    EngineError,
    GenerationRequest,
    GenerationResult,
    TokenPiece,
)
from lmsp_desktop.core.engines.fake import DEFAULT_TOKENS, FakeEngine
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask, TaskStore, finishing
from lmsp_desktop.core.views import TaskChange
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.support.store_helpers import check_invariants, drive, event_types, units_counted
from tests.unit.core.test_runner import Paths, finished, submit

MESSAGES = [{"role": "user", "content": "Say hello."}]


async def test_last_deltas_and_finish_commit_together_and_a_cancel_before_them_wins(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = [await drive(store.tasks, TaskState.RUNNING) for _ in range(4)]  # "Hel", "lo"
    cancelled = running[1]
    await store.tasks.cancel(cancelled)
    units = units_counted(monkeypatch)
    heard: list[TaskChange] = []
    store.tasks.listeners.append(heard.append)

    async def last(task_id: str) -> bool:
        return await store.tasks.append_deltas(
            task_id,
            [" wor", "ld"],
            output_tokens=4,
            input_tokens=3,
            snapshot=None,
            finish=finishing(task_id, incomplete_reason=None, input_tokens=3, output_tokens=4),
        )

    done = await asyncio.gather(*(last(task_id) for task_id in running))

    assert done == [task_id != cancelled for task_id in running]
    assert units == [1]  # the four tasks' deltas and finishes: one transaction
    rows = check_invariants(store.db.path)  # gapless logs, legal moves, state = last event
    for task_id in running:
        types = event_types(store.db.path, task_id)
        row = await store.tasks.get(task_id)
        if task_id == cancelled:  # nothing of the last hand-over: no text, no completion
            assert rows[task_id]["state"] == TaskState.CANCELLING
            assert types[-1] == "response.cancelling"
            assert row["output_text"] == "Hello"
            continue
        assert rows[task_id]["state"] == TaskState.COMPLETED
        assert row["output_text"] == "Hello world"
        assert row["snapshot"] is None
        assert types[-6:] == [
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        completed = (await store.tasks.events(task_id))[-1]
        assert completed["response"]["output"][0]["content"][0]["text"] == "Hello world"
        assert completed["response"]["usage"]["output_tokens"] == 4
    # Listeners hear each task's deltas, then its finish with the last sequence number.
    per_task = {
        t: [(c.state, c.last_seq) for c in heard if c.task_id == t]
        for t in running
        if t != cancelled
    }
    assert per_task == {
        t: [
            (TaskState.RUNNING, rows[t]["last_seq"] - 4),
            (TaskState.COMPLETED, rows[t]["last_seq"]),
        ]
        for t in per_task
    }
    assert not [c for c in heard if c.task_id == cancelled]


async def test_a_finish_made_after_a_cancel_does_not_overtake_it(store: Store) -> None:
    """A finish joining a delta batch submitted before a cancel would commit ahead of it."""
    early, racer = [await drive(store.tasks, TaskState.RUNNING) for _ in range(2)]
    waiting = asyncio.ensure_future(
        store.tasks.append_deltas(early, ["!"], output_tokens=3, input_tokens=3, snapshot=None)
    )
    await asyncio.sleep(0)  # the batch is submitted, the writer not yet done with it
    cancel = asyncio.ensure_future(store.tasks.cancel(racer))
    await asyncio.sleep(0)
    finish = finishing(racer, incomplete_reason=None, input_tokens=3, output_tokens=3)
    done = await store.tasks.append_deltas(
        racer, ["!"], output_tokens=3, input_tokens=3, snapshot=None, finish=finish
    )
    assert await waiting
    assert (await cancel)["state"] == TaskState.CANCELLING
    assert done is False
    assert event_types(store.db.path, racer)[-1] == "response.cancelling"
    check_invariants(store.db.path)


class Ending:
    """An EndingSink's two sides, recorded."""

    def __init__(self) -> None:
        self.batches: list[list[TokenPiece]] = []
        self.last: list[tuple[list[TokenPiece], GenerationResult]] = []

    async def each(self, pieces: list[TokenPiece]) -> bool:
        self.batches.append(pieces)
        return True

    async def end(self, pieces: list[TokenPiece], result: GenerationResult) -> bool:
        self.last.append((pieces, result))
        return True


async def test_the_engines_end_comes_with_its_last_tokens() -> None:
    model = await FakeEngine(token_delay=0.002).load(Path("fake.gguf"))
    ending = Ending()
    request = GenerationRequest(MESSAGES, seed=5, sink_interval=0.05)
    result = await model.generate(request, EndingSink(ending.each, ending.end))
    assert len(ending.last) == 1
    pieces, told = ending.last[0]
    assert pieces  # the tokens of the last interval go with the end, not before it
    handed = [p.text for batch in ending.batches for p in batch] + [p.text for p in pieces]
    assert handed == list(DEFAULT_TOKENS)
    assert told == result
    assert result.finish_reason == "stop"
    assert result.output_tokens == len(DEFAULT_TOKENS)


async def test_an_engine_that_fails_hands_its_tokens_over_without_an_end() -> None:
    model = await FakeEngine(fail_at=2).load(Path("fake.gguf"))
    ending = Ending()
    with pytest.raises(EngineError):
        await model.generate(GenerationRequest(MESSAGES), EndingSink(ending.each, ending.end))
    assert ending.last == []
    assert [p.text for batch in ending.batches for p in batch] == list(DEFAULT_TOKENS[:2])


async def test_the_runner_finishes_a_task_with_its_last_deltas(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    separate: list[str] = []
    real_finish = TaskStore.finish

    async def finish(self: TaskStore, task_id: str, **kw: Any) -> bool:
        separate.append(task_id)
        return await real_finish(self, task_id, **kw)

    monkeypatch.setattr(TaskStore, "finish", finish)
    engine = FakeEngine(token_delay=0.002)
    async with started(Runner(store.tasks, Paths(), engine)):
        plain = await submit(store)
        request = {**parse_create({"model": "m", "input": "hi"}, "fail"), "stop": ["never"]}
        stopping = (await store.tasks.create(NewTask(model="m", request=request))).task_id
        await until(lambda: finished(store, plain))
        await until(lambda: finished(store, stopping))
    for task_id in (plain, stopping):
        row = await store.tasks.get(task_id)
        assert row["state"] == TaskState.COMPLETED
        assert row["output_text"] == "".join(DEFAULT_TOKENS)
        assert json.loads(row["request"])["model"] == "m"
    # The plain task's finish rode with its last deltas; a stop sequence's (text held back,
    # flushed at the end) still finishes on its own.
    assert separate == [stopping]
    check_invariants(store.db.path)


async def test_a_finish_that_fails_leaves_the_last_deltas_with_their_snapshot(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finish rides with the last deltas; when it fails (here its closing events cannot
    be built) the deltas still commit, and the task, still running, must keep a snapshot
    covering them: a crash before it is failed would otherwise resume from token 0 and
    append the whole output again after its text (review of 26b5368)."""
    import dataclasses

    from lmsp_desktop.core import runner as runner_module

    def broken(row: Any) -> Any:
        raise ValueError("closing events could not be built")

    def failing_finish(task_id: str, **values: Any) -> Any:
        return dataclasses.replace(finishing(task_id, **values), events=broken)

    monkeypatch.setattr(runner_module, "finishing", failing_finish)
    left: list[Any] = []
    real_append = TaskStore.append_deltas

    async def append(self: TaskStore, task_id: str, *args: Any, **kw: Any) -> Any:
        try:
            return await real_append(self, task_id, *args, **kw)
        except ValueError:
            left.append(await self.get(task_id))  # what a crash right now would leave
            raise

    monkeypatch.setattr(TaskStore, "append_deltas", append)
    async with started(Runner(store.tasks, Paths(), FakeEngine(token_delay=0.002))):
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))
    [row] = left
    assert row["state"] == TaskState.RUNNING
    assert row["output_text"] == "".join(DEFAULT_TOKENS)
    assert row["snapshot"] is not None
    assert len(json.loads(row["snapshot"])["tokens"]) == row["output_tokens"] == len(DEFAULT_TOKENS)
