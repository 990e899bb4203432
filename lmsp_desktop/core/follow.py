"""Following a task's event log as it is committed: replay from a sequence number, then tail.

Readers wake on the store's after-commit notifications, so a committed event reaches an SSE
client at once; they read from the database, so what they send is always what was committed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from lmsp_desktop.core.states import TERMINAL, TaskState
from lmsp_desktop.core.storage.tasks import TaskChange, TaskStore

PAGE = 500


class EventFollower:
    """Wakes the readers of a task when its events are committed; ends them at shutdown."""

    def __init__(self, tasks: TaskStore) -> None:
        self.tasks = tasks
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self.closed = asyncio.Event()
        tasks.listeners.append(self._on_change)

    def _on_change(self, change: TaskChange) -> None:
        for event in self._waiters.get(change.task_id, ()):
            event.set()

    def close(self) -> None:
        """End every follow() (graceful shutdown ends open SSE streams)."""
        self.closed.set()
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    async def follow(self, task_id: str, after: int = 0) -> AsyncGenerator[dict[str, Any], None]:
        """Every event after `after`, then new ones as they commit, until the task finishes."""
        wake = asyncio.Event()
        self._waiters.setdefault(task_id, set()).add(wake)
        try:
            while True:
                wake.clear()
                events = await self.tasks.events(task_id, after, PAGE)
                for event in events:
                    yield event
                    after = event["sequence_number"]
                if len(events) == PAGE:
                    continue
                if self.closed.is_set():
                    return
                row = await self.tasks.db.fetchone(
                    "SELECT state, last_seq FROM tasks WHERE id=?", (task_id,)
                )
                if row is None or (
                    TaskState(row["state"]) in TERMINAL and row["last_seq"] <= after
                ):
                    return
                if row["last_seq"] > after:
                    continue
                # A timeout too, in case a commit came from another process (the CLI).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=1.0)
        finally:
            waiters = self._waiters.get(task_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[task_id]

    async def wait_finished(self, task_id: str) -> None:
        """Until the task reaches a terminal state (or the service shuts down)."""
        async for _ in self.follow(task_id, await self._last_seq(task_id)):
            pass

    async def _last_seq(self, task_id: str) -> int:
        row = await self.tasks.db.fetchone("SELECT last_seq FROM tasks WHERE id=?", (task_id,))
        return int(row["last_seq"]) if row else 0
