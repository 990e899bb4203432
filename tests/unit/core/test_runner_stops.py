"""Stop sequences when tokens reach the runner in groups (the commit interval): the answer
ends at the token that completed the stop sequence, and usage counts only the tokens up to
it, however many the engine made after it before it noticed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.runner import Runner
from lmsp_desktop.core.storage.events import DELTA
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask
from tests.support.lifecycle import started
from tests.support.polling import until

TOKENS = [" one", " two", " th", "ree.", " END", " four", " five", " six"]


class Paths:
    async def path_for_run(self, model_id: str) -> Path:
        return Path(f"/models/{model_id}.gguf")


async def test_tokens_after_a_stop_sequence_in_the_same_hand_over_are_not_counted(
    store: Store,
) -> None:
    engine = FakeEngine(tokens=TOKENS)
    engine.gate = threading.Semaphore(0)
    request: dict[str, Any] = {**parse_create({"model": "m", "input": "hi"}, "fail")}
    request["stop"] = [" END"]
    created = await store.tasks.create(NewTask(model="m", request=request, on_restart="fail"))
    task_id = created.task_id

    async def deltas() -> list[str]:
        events = await store.tasks.events(task_id)
        return [e["delta"] for e in events if e["type"] == DELTA]

    # An hour between hand-overs: the first token goes alone, all the others together at
    # the end of the generation (a fast model within one commit interval).
    async with started(Runner(store.tasks, Paths(), engine, commit_interval=3600.0)):
        engine.gate.release(1)
        await until(lambda: store.tasks.get(task_id), what="the task")
        await until(deltas, what="the first token committed")
        engine.gate.release(len(TOKENS))
        row = await until(
            lambda: _finished(store, task_id), what="the task finished by its stop sequence"
        )

    assert row["state"] == "completed"
    assert row["output_text"] == " one two three."
    assert row["stop_sequence"] == " END"  # Anthropic's answer names it
    # Five tokens made the text and the stop sequence; the three after it are not output.
    assert row["output_tokens"] == 5
    # Still one delta per token (the stop sequence's own token shows nothing).
    assert await deltas() == [" one", " two", " th", "ree."]


async def _finished(store: Store, task_id: str) -> Any:
    row = await store.tasks.get(task_id)
    return row if row["state"] in ("completed", "incomplete", "failed", "cancelled") else None
