"""Following a task's event log as it is committed: replay from a sequence number, then tail.

Readers wake on the store's after-commit notifications, so a committed event reaches an SSE
client at once. What they send is always what was committed: events are read from the
database, except text deltas a notification carries (the store publishes them only after
their commit), which a reader that is caught up takes from the notification instead of
reading them back: two database round trips fewer per token on the streaming hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

from lmsp_desktop.core.states import TERMINAL, TaskState
from lmsp_desktop.core.storage.tasks import TaskStore
from lmsp_desktop.core.views import TaskChange

PAGE = 500
# A follow() that heard nothing for this long reads the database anyway: a commit may have
# come from another process (the CLI).
QUIET_S = 1.0


def _set(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Reader:
    """One follow(): its wake-up, the committed events heard since it last read, and the
    newest state and event number the notifications told it."""

    def __init__(self) -> None:
        self.woken = False  # heard something (or the follower closed) since it last looked
        # The wait for that, while the reader waits. A bare future and a timer, not
        # wait_for(Event.wait()): that is a task, a timeout and three callbacks per commit
        # on the streaming hot path.
        self._waiter: asyncio.Future[None] | None = None
        self.heard: deque[dict[str, Any]] = deque()
        self.gap = False  # a commit without its events: read the database
        self.state: TaskState | None = None
        self.last_seq = 0

    def on_change(self, change: TaskChange) -> None:
        if change.events:
            self.heard.extend(change.events)
        elif change.last_seq > self.last_seq:
            self.gap = True
        self.state = change.state
        self.last_seq = max(self.last_seq, change.last_seq)
        self.wake()

    def wake(self) -> None:
        self.woken = True
        if self._waiter is not None:
            _set(self._waiter)

    async def wait(self) -> bool:
        """Until woken or QUIET_S pass; whether it was woken."""
        if not self.woken:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(QUIET_S, _set, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        return self.woken

    def take(self, after: int) -> list[dict[str, Any]]:
        """The heard events right after `after`, if they continue it without a gap."""
        out: list[dict[str, Any]] = []
        while self.heard:
            event = self.heard.popleft()
            seq = event["sequence_number"]
            if seq <= after:
                continue  # already read from the database
            if seq != after + 1:
                self.heard.clear()
                self.gap = True
                break
            out.append(dict(event))  # each reader its own copy, as if read from the database
            after = seq
        return out


class EventFollower:
    """Wakes the readers of a task when its events are committed; ends them at shutdown."""

    def __init__(self, tasks: TaskStore) -> None:
        self.tasks = tasks
        self._readers: dict[str, set[_Reader]] = {}
        self.closed = asyncio.Event()
        tasks.listeners.append(self._on_change)

    def _on_change(self, change: TaskChange) -> None:
        for reader in self._readers.get(change.task_id, ()):
            reader.on_change(change)

    def close(self) -> None:
        """End every follow() (graceful shutdown ends open SSE streams)."""
        self.closed.set()
        for readers in self._readers.values():
            for reader in readers:
                reader.wake()

    async def follow(self, task_id: str, after: int = 0) -> AsyncGenerator[dict[str, Any], None]:
        """Every event after `after`, then new ones as they commit, until the task finishes."""
        async with contextlib.aclosing(self.follow_batches(task_id, after)) as batches:
            async for batch in batches:
                for event in batch:
                    yield event

    async def follow_batches(
        self, task_id: str, after: int = 0
    ) -> AsyncGenerator[list[dict[str, Any]], None]:
        """Like `follow`, the events that are ready at once together (the deltas of one
        commit, a page of the log): an SSE stream sends each such batch in one write."""
        reader = _Reader()
        self._readers.setdefault(task_id, set()).add(reader)
        from_database = True
        try:
            while True:
                reader.woken = False
                if from_database:
                    reader.gap = False
                    events = await self.tasks.events(task_id, after, PAGE)
                else:
                    events = reader.take(after)
                if events:
                    after = events[-1]["sequence_number"]
                    yield events
                if from_database and len(events) == PAGE:
                    continue
                if self.closed.is_set():
                    return
                if from_database or reader.state is None:
                    progress = await self.tasks.progress(task_id)
                    if progress is None:
                        return
                    state, last_seq = progress
                else:
                    state, last_seq = reader.state, reader.last_seq
                if state in TERMINAL and last_seq <= after:
                    return
                from_database = reader.gap or (last_seq > after and not reader.heard)
                if last_seq > after or reader.heard:
                    continue
                if not await reader.wait():
                    from_database = True
        finally:
            readers = self._readers.get(task_id)
            if readers is not None:
                readers.discard(reader)
                if not readers:
                    del self._readers[task_id]

    async def wait_finished(self, task_id: str) -> None:
        """Until the task reaches a terminal state (or the service shuts down)."""
        async for _ in self.follow(task_id, await self._last_seq(task_id)):
            pass

    async def _last_seq(self, task_id: str) -> int:
        progress = await self.tasks.progress(task_id)
        return progress[1] if progress else 0
