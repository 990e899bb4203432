"""The runner when a model's engine process dies (EngineCrashed, with a scripted engine):
each task gets its restart policy by the recovery table, the model is loaded afresh, and a
model that crashed twice within 10 minutes waits for the user to load it again. The real
processes and signals: tests/integration/test_engine_worker_crash.py."""

from __future__ import annotations

import json

from lmsp_desktop.core.engines.base import EngineCrashed
from lmsp_desktop.core.engines.fake import DEFAULT_TOKENS, FakeEngine
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.storage.store import Store
from tests.support.lifecycle import started
from tests.support.polling import until
from tests.unit.core.test_runner import Paths, finished, submit


async def error_of(store: Store, task_id: str) -> dict[str, str]:
    row = await store.tasks.get(task_id)
    return json.loads(row["error"])  # type: ignore[no-any-return]


async def test_a_crash_resumes_a_resume_task_in_a_fresh_engine(store: Store) -> None:
    engine = FakeEngine(
        token_delay=0.005, load_delay=0.5, fail_at=3, fail_error=EngineCrashed("m", "SIGKILL")
    )
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        task_id = await submit(store, on_restart="resume")
        await until(lambda: runner.last_crash("m") is not None, interval=0.005)
        engine.fail_at = None  # the fresh engine (loading for 0.5 s now) does not crash
        await until(lambda: finished(store, task_id))
        row = await store.tasks.get(task_id)
        assert row["state"] == "completed"
        assert row["output_text"] == "".join(DEFAULT_TOKENS)
        types = [e["type"] for e in await store.tasks.events(task_id)]
        assert "response.resumed" in types
        assert engine.load_count == 2
        crash = runner.last_crash("m")
        assert crash is not None and crash.as_api()["tasks"] == {"resumed": 1}
        assert crash.cause == "SIGKILL" and not crash.held


async def test_a_crash_fails_the_fail_tasks_of_the_model_queued_ones_too(store: Store) -> None:
    """As after a restart of the service (LMSP_API.md): the model's unfinished tasks, the
    queued ones too, follow their policies."""
    engine = FakeEngine(
        token_delay=0.02, load_delay=0.5, fail_at=3, fail_error=EngineCrashed("m", "SIGSEGV")
    )
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        running = await submit(store, on_restart="fail")
        queued = await submit(store, on_restart="fail")  # one lane: waits behind it
        requeued = await submit(store, on_restart="retry")
        await until(lambda: finished(store, running))
        await until(lambda: finished(store, queued))
        for task_id in (running, queued):
            error = await error_of(store, task_id)
            assert error["code"] == "engine_crashed"
            assert "SIGSEGV" in error["message"]
        # The queued one failed with the crash: it never ran in a fresh engine.
        assert "response.in_progress" not in [e["type"] for e in await store.tasks.events(queued)]
        crash = runner.last_crash("m")
        assert crash is not None and crash.as_api()["tasks"] == {"failed": 2, "requeued": 1}
        engine.fail_at = None
        await until(lambda: finished(store, requeued))
        assert (await store.tasks.get(requeued))["state"] == "completed"


async def test_two_crashes_in_ten_minutes_hold_the_model_until_loaded_again(
    store: Store,
) -> None:
    engine = FakeEngine(token_delay=0.005, fail_at=1, fail_error=EngineCrashed("m", "SIGABRT"))
    async with started(Runner(store.tasks, Paths(), engine)) as runner:
        first = await submit(store, on_restart="fail")
        await until(lambda: finished(store, first))
        engine.fail_error = EngineCrashed("m", "SIGABRT")  # another process, another crash
        second = await submit(store, on_restart="fail")
        await until(lambda: finished(store, second))
        crash = runner.last_crash("m")
        assert crash is not None and crash.held
        assert engine.load_count == 2

        held = await submit(store, on_restart="retry")
        await until(lambda: finished(store, held))
        error = await error_of(store, held)
        assert error["code"] == "engine_crashed"
        assert "not loaded again by itself" in error["message"]
        assert engine.load_count == 2  # never loaded by itself

        engine.fail_at = None
        await runner.load_again("m")
        assert engine.load_count == 3
        after = await submit(store)
        await until(lambda: finished(store, after))
        assert (await store.tasks.get(after))["state"] == "completed"
