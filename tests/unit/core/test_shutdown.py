"""Stopping runs every step even when one fails: a failing HTTP close still unloads the models,
closes the store and frees the data directory; a failing unload still unloads the others."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.lock import DataDirLock
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.shutdown import StopSteps
from lmsp_desktop.core.storage.store import Store
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.unit.core.test_runner import Paths, finished, submit


class Broken(RuntimeError):
    pass


def spy(calls: list[str], name: str, real: Callable[[], Any]) -> Callable[[], Any]:
    """The real step, noting that it ran."""

    def step() -> Any:
        calls.append(name)
        return real()

    return step


async def failing() -> None:
    raise Broken("the listener would not close")


async def test_a_failing_listener_close_still_stops_everything_after_it(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    core = Core(data_dir, port=0, engine=FakeEngine(), include_demo=False)
    await core.start()
    assert (data_dir / "service.json").exists()
    calls: list[str] = []
    assert core.host is not None
    listener_stop = core.host.stop
    core.host.stop = failing  # type: ignore[method-assign]
    core.runner.stop = spy(calls, "runner", core.runner.stop)  # type: ignore[method-assign]
    core.registry.close = spy(calls, "registry", core.registry.close)  # type: ignore[method-assign]
    core.store.close = spy(calls, "store", core.store.close)  # type: ignore[method-assign]

    with caplog.at_level(logging.ERROR), pytest.raises(Broken, match="would not close"):
        await core.stop()

    assert calls == ["runner", "registry", "store"]
    assert not (data_dir / "service.json").exists()
    next_start = DataDirLock(data_dir)
    next_start.acquire()  # refused with data_dir_in_use if the lock were still held
    next_start.release()
    failure = next(r for r in caplog.records if "closing the HTTP listener failed" in r.message)
    assert failure.exc_info is not None and failure.exc_info[0] is Broken  # with its traceback
    await listener_stop()  # the socket the double left open


async def test_a_failing_store_close_still_frees_the_data_directory(data_dir: Path) -> None:
    core = Core(data_dir, port=0, engine=FakeEngine(), include_demo=False)
    await core.start()
    real_close = core.store.close

    async def close_then_fail() -> None:
        await real_close()
        raise Broken("disk went away")

    core.store.close = close_then_fail  # type: ignore[method-assign]
    with pytest.raises(Broken):
        await core.stop()
    next_start = DataDirLock(data_dir)
    next_start.acquire()
    next_start.release()


async def test_a_failing_unload_still_unloads_the_other_models(store: Store) -> None:
    engine = FakeEngine()
    async with started(Runner(store.tasks, Paths(), engine, max_loaded_models=2)) as runner:
        for model in ("a", "b"):
            task_id = await submit(store, model)
            await until(lambda task_id=task_id: finished(store, task_id))
        assert runner.loaded_state("a") == runner.loaded_state("b") == "loaded"
        first, second = engine.models
        real_unload = first.unload
        first.unload = failing  # type: ignore[method-assign]
        with pytest.raises(Broken):
            await runner.stop()
        first.unload = real_unload  # type: ignore[method-assign]  # for started's own stop
    assert second.unloaded and engine.unload_count == 1
    assert runner.loaded_state("a") == runner.loaded_state("b") == "unloaded"


async def test_a_cancelled_step_does_not_skip_the_later_ones() -> None:
    """A cancellation arriving mid-stop still lets the lock go; it is raised at the end."""
    ran: list[str] = []
    steps = StopSteps("stopping")

    async def cancelled() -> None:
        raise asyncio.CancelledError

    await steps.run("a", cancelled)
    await steps.run("b", lambda: ran.append("b"))
    await steps.run("c", failing)
    assert ran == ["b"]
    with pytest.raises(asyncio.CancelledError) as raised:
        steps.raise_first()
    assert raised.value.__notes__ == ["1 later step(s) of stopping failed too; see the log"]
