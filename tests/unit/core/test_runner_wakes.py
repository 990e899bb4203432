"""The creates of one commit are heard in one loop turn, and the runner wakes a model's lanes
once for them (B1), not once each: every task of every model in the group still runs, and so
do the tasks of later commits, together or one at a time."""

from __future__ import annotations

import asyncio

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.storage.store import Store
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.unit.core.test_runner import Paths, finished, state_of, submit


async def _all_completed(store: Store, task_ids: list[str]) -> None:
    async def done() -> bool:
        return all([await finished(store, task_id) for task_id in task_ids])

    await until(done, what=lambda: f"{len(task_ids)} tasks completed")
    assert {await state_of(store, task_id) for task_id in task_ids} == {"completed"}


async def test_every_task_of_grouped_creates_runs_for_each_model(store: Store) -> None:
    engine = FakeEngine(tokens=["a", "b"])
    runner = Runner(store.tasks, Paths(), engine, parallel_per_model=2, max_loaded_models=2)
    async with started(runner):
        wakes: list[str] = []
        wake = runner._wake

        def counted(model: str) -> None:
            wakes.append(model)
            wake(model)

        runner._wake = counted  # type: ignore[method-assign]
        # Created at once: they share commits, and each commit's creates are heard together.
        first = await asyncio.gather(*(submit(store, "m" if i % 2 else "n") for i in range(40)))
        await _all_completed(store, list(first))
        assert len(wakes) < 40  # one wake per model per commit heard, not one per create
        # A later group, after the first has run: heard in another turn, it wakes them again.
        second = await asyncio.gather(*(submit(store, "n") for _ in range(10)))
        await _all_completed(store, list(second))
        # And creates one at a time, each its own commit.
        for _ in range(3):
            await _all_completed(store, [await submit(store, "m")])
