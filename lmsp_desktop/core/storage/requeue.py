"""Starting a running task over while the service runs (policy `retry` after an upstream
cut its stream): the same move as recovery's `retry` cell, with the same event."""

from __future__ import annotations

from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.tasks import TaskStore
from lmsp_desktop.core.storage.transitions import requeued

MAX_RESTARTS = 3  # starts over at most this often (restarts after crashes count too)


async def requeue_for_retry(tasks: TaskStore, task_id: str) -> bool:
    """running → queued with `response.queued` (`output: []`), discarding the output; the
    next run opens a new item. False when the task has been started over too often or is
    no longer running (then the caller fails or confirms the cancel)."""
    current = await tasks.get(task_id)
    if current["restarts"] >= MAX_RESTARTS:
        return False
    return bool(await tasks.transition(requeued([task_id], TaskState.RUNNING)))


__all__ = ["MAX_RESTARTS", "requeue_for_retry"]
