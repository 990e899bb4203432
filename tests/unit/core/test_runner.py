"""The runner with a scripted engine: queues, single-flight loading, cancel, failures, resume."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lmsp_desktop.core.api.resource import task_object
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.engines.base import EngineError, LoadSettings
from lmsp_desktop.core.engines.fake import DEFAULT_TOKENS, FakeEngine
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.states import TERMINAL, TaskState
from lmsp_desktop.core.storage.recovery import next_boot, recover
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask
from lmsp_desktop.core.views import TaskRow
from tests.support.lifecycle import started
from tests.support.polling import until


class Paths:
    """The registry as the runner sees it: every known model id maps to a file."""

    def __init__(self, refused: dict[str, LmspError] | None = None) -> None:
        self.refused = refused or {}

    async def path_for_run(self, model_id: str) -> Path:
        if model_id in self.refused:
            raise self.refused[model_id]
        return Path(f"/models/{model_id}.gguf")


async def submit(store: Store, model: str = "m", **body: object) -> str:
    request = parse_create({"model": model, "input": "hi", **body}, "fail")
    result = await store.tasks.create(
        NewTask(model=model, request=request, on_restart=request["on_restart"])
    )
    return result.task_id


async def state_of(store: Store, task_id: str) -> str:
    return (await store.tasks.get(task_id))["state"]  # type: ignore[no-any-return]


async def finished(store: Store, task_id: str) -> bool:
    return TaskState(await state_of(store, task_id)) in TERMINAL


@pytest.fixture
async def running(store: Store) -> AsyncIterator[tuple[Store, FakeEngine, Runner]]:
    engine = FakeEngine(token_delay=0.005, load_delay=0.05)
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        yield store, engine, runner


async def test_a_task_runs_to_completion_with_the_engine_text(running) -> None:  # type: ignore[no-untyped-def]
    store, _, _ = running
    task_id = await submit(store)
    await until(lambda: finished(store, task_id))
    row = await store.tasks.get(task_id)
    assert row["state"] == "completed"
    assert row["output_text"] == "".join(DEFAULT_TOKENS)
    types = [e["type"] for e in await store.tasks.events(task_id)]
    assert types[:3] == ["response.created", "response.loading", "response.in_progress"]
    assert types[-1] == "response.completed"


async def test_second_task_with_a_loaded_model_skips_loading(running) -> None:  # type: ignore[no-untyped-def]
    store, _, _ = running
    first = await submit(store)
    await until(lambda: finished(store, first))
    second = await submit(store)
    await until(lambda: finished(store, second))
    types = [e["type"] for e in await store.tasks.events(second)]
    assert "response.loading" not in types
    assert types[1] == "response.in_progress"


async def test_loading_is_single_flight_and_queue_is_fifo(running) -> None:  # type: ignore[no-untyped-def]
    store, engine, _ = running
    ids = [await submit(store) for _ in range(4)]
    for task_id in ids:
        await until(lambda t=task_id: finished(store, t))
    assert engine.load_count == 1
    started = [(await store.tasks.get(t))["started_at"] for t in ids]
    assert started == sorted(started)


async def test_max_output_tokens_ends_incomplete(running) -> None:  # type: ignore[no-untyped-def]
    store, _, _ = running
    task_id = await submit(store, max_output_tokens=3)
    await until(lambda: finished(store, task_id))
    row = await store.tasks.get(task_id)
    assert row["state"] == "incomplete"
    assert row["incomplete_reason"] == "max_output_tokens"
    assert row["output_text"] == "".join(DEFAULT_TOKENS[:3])


async def test_cancel_during_generation_stops_within_one_token(store: Store) -> None:
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine)):
        task_id = await submit(store)
        engine.gate.release(2)
        await until(lambda: _output_is(store, task_id, "".join(DEFAULT_TOKENS[:2])))
        await store.tasks.cancel(task_id)
        engine.gate.release(len(DEFAULT_TOKENS))  # let the engine run on if it ignored cancel
        await until(lambda: finished(store, task_id))
        row = await store.tasks.get(task_id)
        assert row["state"] == "cancelled"
        # The partial output is kept, and nothing generated after the cancel was persisted.
        assert row["output_text"] == "".join(DEFAULT_TOKENS[:2])
        types = [e["type"] for e in await store.tasks.events(task_id)]
        assert types.count("response.cancelled") == 1
        assert "response.completed" not in types


async def _output_is(store: Store, task_id: str, text: str) -> bool:
    return (await store.tasks.get(task_id))["output_text"] == text  # type: ignore[no-any-return]


async def test_cancel_while_queued_never_runs(store: Store) -> None:
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine)):
        first = await submit(store)
        second = await submit(store)
        await store.tasks.cancel(second)
        engine.gate.release(100)
        await until(lambda: finished(store, first))
        assert await state_of(store, second) == "cancelled"
        assert len(engine.requests) == 1


class HeldLoad(FakeEngine):
    """A model whose load goes on until the test releases it (a big model from a slow disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def load(self, path, progress=None, *, settings=None):  # type: ignore[no-untyped-def]
        await self.release.wait()
        return await super().load(path, progress, settings=settings)


async def test_a_cancel_while_its_model_loads_is_confirmed_before_the_load_ends(
    store: Store,
) -> None:
    engine = HeldLoad()
    async with started(Runner(store.tasks, Paths(), engine)):
        first = await submit(store)
        await until(lambda: _state_is(store, first, "loading"))
        await store.tasks.cancel(first)
        # Cancelled at once, while the load still goes on (LM Studio and Ollama users see
        # their Cancel take effect; it used to say "cancelling" until the load ended).
        await until(lambda: finished(store, first))
        assert await state_of(store, first) == "cancelled"
        assert engine.load_count == 0  # the load has not ended
        # The load goes on for the model's next task: one load serves it.
        second = await submit(store)
        engine.release.set()
        await until(lambda: finished(store, second))
        assert await state_of(store, second) == "completed"
        assert engine.load_count == 1
        assert len(engine.requests) == 1  # the cancelled task never generated


async def test_the_runners_stop_ends_a_load_whose_task_was_cancelled(store: Store) -> None:
    engine = HeldLoad()
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        task_id = await submit(store)
        await until(lambda: _state_is(store, task_id, "loading"))
        await store.tasks.cancel(task_id)
        await until(lambda: finished(store, task_id))
    # The stop cancelled the load left going: nothing is loaded after it.
    assert engine.load_count == 0
    assert not runner._loads_left


async def _state_is(store: Store, task_id: str, state: str) -> bool:
    return await state_of(store, task_id) == state


async def test_engine_error_fails_the_task_with_its_code(store: Store) -> None:
    engine = FakeEngine(fail_at=2, fail_error=EngineError("engine_crashed", "boom"))
    async with started(Runner(store.tasks, Paths(), engine)):
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))
        row = await store.tasks.get(task_id)
        assert row["state"] == "failed"
        assert '"engine_crashed"' in row["error"]


async def test_refused_model_fails_with_the_registry_code(store: Store) -> None:
    refusal = LmspError("changed on disk", code="model_changed", status=409)
    async with started(Runner(store.tasks, Paths({"m": refusal}), FakeEngine())):
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))
        row = await store.tasks.get(task_id)
        assert row["state"] == "failed"
        assert '"model_changed"' in row["error"]


async def test_max_loaded_models_unloads_the_idle_one(store: Store) -> None:
    engine = FakeEngine()
    async with started(Runner(store.tasks, Paths(), engine, max_loaded_models=1)) as runner:
        a = await submit(store, "a")
        await until(lambda: finished(store, a))
        b = await submit(store, "b")
        await until(lambda: finished(store, b))
        assert runner.loaded_state("a") == "unloaded"
        assert runner.loaded_state("b") == "loaded"
        assert engine.unload_count == 1


async def test_idle_model_is_unloaded_after_its_ttl(store: Store) -> None:
    engine = FakeEngine()
    async with started(Runner(store.tasks, Paths(), engine, idle_unload_s=0.1)) as runner:
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))

        async def unloaded() -> bool:
            return runner.loaded_state("m") == "unloaded"

        await until(unloaded)
        # The slot goes first, the unload runs on (shielded): wait for it rather than race it.
        await until(lambda: engine.unload_count == 1, what=lambda: engine.unload_count)


async def test_stop_finishes_an_unload_the_idle_timer_had_begun(store: Store) -> None:
    """The service stops while the idle timer is unloading a model: stop() waits for that
    unload to end instead of cutting it short (a model left half-freed at exit; an upstream's
    connection left open)."""
    engine = FakeEngine()
    runner = Runner(store.tasks, Paths(), engine, idle_unload_s=0.1)
    await runner.start()
    try:
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))
        model = engine.models[0]
        entered, release = asyncio.Event(), asyncio.Event()
        unload = model.unload

        async def slow_unload() -> None:
            entered.set()
            await release.wait()  # freeing takes a while (a big model, a busy machine)
            await unload()

        model.unload = slow_unload  # type: ignore[method-assign]
        await until(entered.is_set, what="the idle timer unloading the model")
        stopping = asyncio.create_task(runner.stop())
        await until(lambda: runner._stopping, what="the stop begun")
        await asyncio.sleep(0)  # the stop cancels the idle timer mid-unload
        release.set()
        await asyncio.wait_for(stopping, 60)  # a bound on a hang
    finally:
        if not runner._stopping:
            await runner.stop()
    assert engine.unload_count == 1, "the stop returned with the model still loaded"


async def test_resumed_task_continues_from_its_snapshot(data_dir: Path) -> None:
    """A running task with on_restart=resume, interrupted after 3 tokens, finishes with the
    same text as an uninterrupted run and replays exactly the snapshot's tokens."""
    store = Store(data_dir)
    await store.open()
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine)):
        task_id = await submit(store, on_restart="resume")
        engine.gate.release(3)
        await until(lambda: _output_is(store, task_id, "".join(DEFAULT_TOKENS[:3])))
    # Leaving the block stopped the runner: a shutdown leaves the task running, like a crash.
    await store.close()

    store = Store(data_dir)
    await store.open()
    report = await recover(store.tasks, await next_boot(store.tasks))
    assert [i.event_type for i in report.items] == ["response.resumed"]
    engine2 = FakeEngine()
    try:
        async with started(Runner(store.tasks, Paths(), engine2)):
            await until(lambda: finished(store, task_id))
            row = await store.tasks.get(task_id)
            assert row["state"] == "completed"
            assert row["output_text"] == "".join(DEFAULT_TOKENS)
            assert engine2.requests[0].resume_tokens == [1000, 1001, 1002]
            deltas = [
                e["delta"]
                for e in await store.tasks.events(task_id)
                if e["type"] == "response.output_text.delta"
            ]
            assert "".join(deltas) == "".join(DEFAULT_TOKENS)  # nothing repeated or skipped
    finally:
        await store.close()


@pytest.mark.parametrize("policy", ["resume", "retry"])
async def test_a_task_run_again_after_a_restart_has_no_downtime_in_its_duration(
    data_dir: Path, policy: str
) -> None:
    """A task cut by a restart and run again after it: its duration (finished_at -
    started_at in the task object, the window's Duration column) is the run that produced
    its answer, not the hour the service was down."""
    store = Store(data_dir)
    await store.open()
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine)):
        task_id = await submit(store, on_restart=policy)
        engine.gate.release(3)
        await until(lambda: _output_is(store, task_id, "".join(DEFAULT_TOKENS[:3])))
    await store.close()
    # The service was down for an hour: everything it wrote happened an hour ago.
    with contextlib.closing(sqlite3.connect(database_path(data_dir))) as conn, conn:
        conn.execute("UPDATE tasks SET created_at=created_at-3600, started_at=started_at-3600")
        conn.execute("UPDATE task_events SET created_at=created_at-3600")

    store = Store(data_dir)
    await store.open()
    await recover(store.tasks, await next_boot(store.tasks))
    try:
        async with started(Runner(store.tasks, Paths(), FakeEngine())):
            await until(lambda: finished(store, task_id))
        task = task_object(await store.tasks.get(task_id))
        assert task["state"] == "completed" and task["restarts"] == 1
        assert 0 <= task["finished_at"] - task["started_at"] < 600
        (listed,) = await store.tasks.listed_by_id([task_id])
        duration = TaskRow.of(listed).duration()
        assert duration is not None and duration < 600
    finally:
        await store.close()


async def test_parallel_lanes_run_tasks_of_one_model_side_by_side(store: Store) -> None:
    """parallel_per_model=2: two tasks of one model run at once on its one loaded copy, and
    no task is ever run twice."""
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    async with started(
        Runner(store.tasks, Paths(), engine, max_loaded_models=2, parallel_per_model=2)
    ):
        ids = [await submit(store) for _ in range(3)]

        async def two_running() -> bool:
            states = [await state_of(store, t) for t in ids]
            return states.count("running") == 2 and states.count("queued") == 1

        await until(two_running)
        engine.gate.release(1000)
        for task_id in ids:
            await until(lambda t=task_id: finished(store, t))
        assert engine.load_count == 1  # the lanes share one loaded copy
        assert engine.models[0].max_concurrent_generations == 2
        assert len(engine.requests) == 3  # each task generated exactly once
        assert all([(await store.tasks.get(t))["state"] == "completed" for t in ids])


async def test_idle_seconds_left_counts_down_once_a_loaded_model_is_idle(store: Store) -> None:
    async with started(Runner(store.tasks, Paths(), FakeEngine(), idle_unload_s=600)) as runner:
        assert runner.idle_seconds_left("m") is None  # not loaded
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))
        # Its lane gives the model back just after the finish commits (readers see it first).
        left = await until(lambda: runner.idle_seconds_left("m"))
        assert 500 < left <= 600


async def test_lanes_starting_together_after_a_restart_each_take_a_resumed_task(
    store: Store,
) -> None:
    """After a restart the lanes start at once with nothing new to wake them later: each
    must still find its own resumed task, not give up because another lane claimed the one
    they all saw first."""
    ids = [await submit(store) for _ in range(3)]
    for task_id in ids:
        assert await store.tasks.mark_running(task_id)  # as recovery leaves resumed tasks
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    async with started(Runner(store.tasks, Paths(), engine, parallel_per_model=3)):

        async def all_generating() -> bool:
            return len(engine.requests) == 3

        await until(all_generating)
        assert {r.seed for r in engine.requests} and engine.models[0].generating == 3
        engine.gate.release(1000)
        for task_id in ids:
            await until(lambda t=task_id: finished(store, t))


async def test_a_load_that_cannot_fit_fails_its_task_before_the_engine_loads(
    store: Store,
) -> None:
    """Memory that shrank between the request and the load: the task fails with
    insufficient_memory and the engine never allocates (its load is never called)."""
    engine = FakeEngine()

    async def settings_of(model_id: str) -> LoadSettings:
        raise EngineError("insufficient_memory", "This load needs about 12 GiB ...")

    async with started(Runner(store.tasks, Paths(), engine, settings_of=settings_of)):
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))
    row = await store.tasks.get(task_id)
    assert row["state"] == "failed"
    assert '"insufficient_memory"' in row["error"]
    assert engine.load_count == 0


async def test_the_load_gets_the_settings_and_the_models_own_concurrency(store: Store) -> None:
    engine = FakeEngine(token_delay=0.01)
    wanted = LoadSettings(context_length=2048, parallel=3, kv_type="q8_0", gpu_layers=5)

    async def settings_of(model_id: str) -> LoadSettings:
        return wanted

    async with started(Runner(store.tasks, Paths(), engine, settings_of=settings_of)) as runner:
        ids = [await submit(store) for _ in range(3)]
        for task_id in ids:
            await until(lambda task_id=task_id: finished(store, task_id))
        assert runner.lanes_of("m") == 3
    assert engine.loaded_settings == [wanted]
