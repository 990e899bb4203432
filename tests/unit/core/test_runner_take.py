"""The runner hands a task only a model whose engine process is alive: one that dies right
after its load, before the task waiting for it takes it, is loaded again for that task; a
load whose task was cancelled gives the model back (idle, unloaded after its idle time, and
dropped if it died meanwhile); a model that dies on arrival at every load is a crash while
loading, which counts towards the hold. A scripted model that reports its death as engine
workers do (test_runner_idle_death.MortalModel)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines.base import LoadSettings
from lmsp_desktop.core.engines.fake import DEFAULT_TOKENS, FakeModel
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.storage.store import Store
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.unit.core.test_runner import Paths, finished, state_of, submit
from tests.unit.core.test_runner_idle_death import MortalEngine, MortalModel


class DiesAfterLoad(MortalEngine):
    """Loads when the test releases it; the next `die_after_load` models' processes die one
    loop step after their load reported loaded (killed on their first allocation)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.release = asyncio.Event()
        self.die_after_load = 0

    async def load(
        self, path: Path, progress: Any = None, *, settings: LoadSettings | None = None
    ) -> FakeModel:
        await self.release.wait()
        model = await super().load(path, progress, settings=settings)
        if self.die_after_load:
            self.die_after_load -= 1
            assert isinstance(model, MortalModel)
            asyncio.get_running_loop().call_soon(model.die)
        return model


async def _completed(store: Store, task_id: str) -> None:
    await until(lambda: finished(store, task_id))
    row = await store.tasks.get(task_id)
    assert row["state"] == "completed", row["error"]
    assert row["output_text"] == "".join(DEFAULT_TOKENS)


def _waits_for_the_load(runner: Runner) -> bool:
    """A task's lane waits on the model's load (only lanes wait on `loading`; the user's
    load awaits the engine itself)."""
    slot = runner._slots.get("m")
    return slot is not None and bool(slot.loading._callbacks)  # type: ignore[attr-defined]


async def _loading(store: Store, task_id: str) -> bool:
    return await state_of(store, task_id) == "loading"


async def test_a_model_that_dies_before_its_waiting_task_takes_it_is_loaded_again(
    store: Store,
) -> None:
    engine = DiesAfterLoad(token_delay=0.001)
    engine.die_after_load = 1
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        # The user's Load starts it; a task (policy `fail`) comes meanwhile and waits for it.
        user_load = asyncio.create_task(runner.load_again("m"))
        await until(lambda: runner.loaded_state("m") == "loading")
        task_id = await submit(store)
        await until(lambda: _loading(store, task_id))
        # And its lane waits for the load (its state shows `loading` a few loop steps before
        # that): a lane coming to the model after its load and before the death is a death
        # during the task, failed as a crash (the fresh-clone CI under load, 7802dea).
        await until(lambda: _waits_for_the_load(runner))
        engine.release.set()
        await user_load
        # The process died after the load and before the task took the model: the task
        # loads it afresh instead of failing with engine_crashed on the dead process.
        await _completed(store, task_id)
        assert engine.load_count == 2
        crash = runner.last_crash("m")
        assert crash is not None and crash.idle and not crash.held
        assert runner.loaded_state("m") == "loaded"
        assert runner.idle_seconds_left("m") is not None  # idle again: nothing holds it


async def test_a_load_whose_task_was_cancelled_leaves_the_model_idle(store: Store) -> None:
    engine = DiesAfterLoad()
    async with started(Runner(store.tasks, Paths(), engine, idle_unload_s=0.2)) as runner:
        task_id = await submit(store)
        await until(lambda: _loading(store, task_id))
        await store.tasks.cancel(task_id)
        await until(lambda: finished(store, task_id))
        engine.release.set()  # the load goes on without its task
        await until(lambda: runner.loaded_state("m") == "loaded")
        # Nothing runs on it: it is unloaded after its idle time, as any idle model.
        await until(lambda: engine.unload_count == 1)
        assert runner.loaded_state("m") == "unloaded"
        assert engine.load_count == 1


async def test_a_model_dying_after_a_load_left_by_a_cancel_is_loaded_again(
    store: Store,
) -> None:
    engine = DiesAfterLoad(token_delay=0.001)
    engine.die_after_load = 1
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        cancelled = await submit(store)
        await until(lambda: _loading(store, cancelled))
        await store.tasks.cancel(cancelled)
        await until(lambda: finished(store, cancelled))
        waiting = await submit(store)  # waits for the load its cancelled task left going
        await until(lambda: _loading(store, waiting))
        engine.release.set()
        # The process died while only that left load held the model: dropped when given
        # back, as an idle death, and the waiting task loads it afresh.
        await _completed(store, waiting)
        assert engine.load_count == 2
        crash = runner.last_crash("m")
        assert crash is not None and crash.idle and not crash.held
        assert runner.idle_seconds_left("m") is not None


async def test_a_model_dying_on_arrival_at_every_load_counts_towards_the_hold(
    store: Store,
) -> None:
    engine = MortalEngine(token_delay=0.001)
    engine.dead_on_arrival = 4  # two loads for each of two tasks, then it stays alive
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        for n in range(2):
            task_id = await submit(store)  # policy `fail`
            await until(lambda t=task_id: finished(store, t))
            row = await store.tasks.get(task_id)
            assert row["state"] == "failed"
            assert "engine_crashed" in row["error"]
            assert engine.load_count == 2 * (n + 1)  # loaded again once, not forever
        crash = runner.last_crash("m")
        # The runner itself loaded it again and again: held until the user loads it.
        assert crash is not None and crash.held and not crash.idle
        held = await submit(store)
        await until(lambda: finished(store, held))
        assert "not loaded again by itself" in (await store.tasks.get(held))["error"]
        assert engine.load_count == 4
