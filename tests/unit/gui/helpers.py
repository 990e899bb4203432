"""Builders for GUI tests: real tasks in the real store, and small fakes of core parts."""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask


async def make_task(
    store: Store,
    model: str = "smollm2",
    prompt: str = "Hello",
    *,
    on_restart: RestartPolicy = RestartPolicy.FAIL,
    client_id: str | None = None,
) -> str:
    request = {"input": prompt, "temperature": 0.7, "top_p": 0.95, "background": True}
    result = await store.tasks.create(
        NewTask(model=model, request=request, on_restart=on_restart, client_id=client_id)
    )
    return result.task_id


async def run_task(store: Store, task_id: str, text: list[str], *, finish: bool = True) -> None:
    """Run a task through the store's transitions as a runner would."""
    await store.tasks.mark_running(task_id)
    if text:
        await store.tasks.append_deltas(
            task_id, text, output_tokens=len(text), input_tokens=5, snapshot=None
        )
    if finish:
        await store.tasks.finish(
            task_id, incomplete_reason=None, input_tokens=5, output_tokens=len(text)
        )


class FakeRunner:
    """Confirms cancels the way the real runner does: listens, stops, confirms."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pending: set[Any] = set()
        store.tasks.listeners.append(self._on_change)

    def _on_change(self, change: Any) -> None:
        import asyncio

        if change.state == "cancelling":
            task = asyncio.ensure_future(self.store.tasks.confirm_cancelled(change.task_id))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)

    def loaded_model_ids(self) -> set[str]:
        return {"smollm2"}
