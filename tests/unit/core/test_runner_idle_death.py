"""The runner when a loaded model's engine process dies with no task on it (a scripted
model that reports its death as engine workers do, WorkerModel.when_crashed): the model is
dropped at once and shows unloaded, and the next task loads it again and completes, even
when the death comes between a load and the start of the task that asked for it. The real
worker and a real SIGKILL: tests/integration/test_engine_idle_death.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines.base import EngineCrashed, GenerationRequest, TokenSink
from lmsp_desktop.core.engines.fake import DEFAULT_TOKENS, FakeEngine, FakeModel
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.storage.store import Store
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.unit.core.test_runner import Paths, finished, submit


class MortalModel(FakeModel):
    """A fake whose engine process can die: afterwards every generation gets its crash."""

    def __init__(self, engine: FakeEngine, path: Path) -> None:
        super().__init__(engine, path)
        self.crash: EngineCrashed | None = None
        self._on_crash: Callable[[EngineCrashed], None] | None = None

    def die(self) -> None:
        self.crash = EngineCrashed("m", "SIGKILL")
        if self._on_crash is not None:
            self._on_crash(self.crash)

    def when_crashed(self, callback: Callable[[EngineCrashed], None]) -> None:
        self._on_crash = callback
        if self.crash is not None:
            callback(self.crash)

    async def generate(self, request: GenerationRequest, sink: TokenSink) -> Any:
        if self.crash is not None:
            raise self.crash
        return await super().generate(request, sink)


class MortalEngine(FakeEngine):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dead_on_arrival = 0  # this many next loads die before their task starts

    async def load(self, path: Path, progress: Any = None, **kwargs: Any) -> FakeModel:
        loaded = await super().load(path, progress, **kwargs)
        model = MortalModel(self, loaded.path)
        self.models[-1] = model
        if self.dead_on_arrival:
            self.dead_on_arrival -= 1
            model.crash = EngineCrashed("m", "SIGKILL")  # died before the runner listened
        return model


async def test_an_idle_death_unloads_the_model_and_the_next_task_loads_it(store: Store) -> None:
    engine = MortalEngine(token_delay=0.001)
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        states: list[str] = []
        runner.load_listeners.append(lambda model, state, _progress: states.append(state))
        first = await submit(store)
        await until(lambda: finished(store, first))
        assert runner.loaded_state("m") == "loaded"
        states.clear()

        engine.models[-1].die()  # type: ignore[attr-defined]
        assert runner.loaded_state("m") == "unloaded"
        assert states == ["unloaded"]  # the window and the APIs are told at once
        crash = runner.last_crash("m")
        assert crash is not None and crash.cause == "SIGKILL" and not crash.held
        assert crash.tasks_text() == "none unfinished"

        second = await submit(store)  # policy `fail`: it would fail on the dead process
        await until(lambda: finished(store, second))
        row = await store.tasks.get(second)
        assert row["state"] == "completed", row["error"]
        assert row["output_text"] == "".join(DEFAULT_TOKENS)
        assert engine.load_count == 2


async def test_a_death_between_a_load_and_its_task_loads_it_again(store: Store) -> None:
    engine = MortalEngine(token_delay=0.001)
    engine.dead_on_arrival = 1
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        task_id = await submit(store)
        await until(lambda: finished(store, task_id))
        row = await store.tasks.get(task_id)
        assert row["state"] == "completed", row["error"]
        assert engine.load_count == 2
        assert runner.loaded_state("m") == "loaded"
