"""What a task's earlier run wrote before the task started over (policy `retry`: an upstream
cut its stream, or the service restarted). The store discards that output with the restart,
so the Output tab went blank before the task went on or failed; its events still hold it, and
the tab keeps showing it, saying what happened.

The events are read once per task: a task selected again reads none, and one that started
over again reads only the events since (a retried task of thousands of events was read whole
at each selection)."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from lmsp_desktop.core.states import EventType, TaskState
from lmsp_desktop.gui.core_api import CoreApi

PAGE = 1000
KEPT_TASKS = 64  # retried tasks remembered (their earlier and current run's text)


@dataclass
class _Reading:
    """How far one task's events were read, and the runs' text so far."""

    after: int = 0  # the last event read
    restarts: int | None = None  # the task's restart count when last read
    earlier: str = ""  # the run before the last start-over
    current: list[str] = field(default_factory=list)  # the run since
    # One read at a time: the selection and a refresh both asking while the first read runs
    # would read every event twice (the CI saw 6,012 rows read for a task of 3,006 events).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def apply(self, row: Any) -> None:
        if row["type"] == EventType.OUTPUT_TEXT_DELTA:
            self.current.append(json.loads(row["data"]).get("delta", ""))
        elif row["type"] == EventType.QUEUED and self.current:
            # Started over: the run so far is the earlier one; the next begins afresh.
            self.earlier, self.current = "".join(self.current), []
        self.after = row["seq"]


class EarlierRuns:
    """The earlier run's text of the retried tasks shown lately."""

    def __init__(self, core: CoreApi, keep: int = KEPT_TASKS) -> None:
        self.core = core
        self.keep = keep
        self._tasks: OrderedDict[str, _Reading] = OrderedDict()

    async def text(self, task_id: str, restarts: int) -> str:
        """The text of the run before the last start-over ("" when there was none or it
        wrote nothing): the text deltas between a run's start and the `response.queued`
        after it. Reads the store only when `restarts` moved since the last call."""
        reading = self._tasks.pop(task_id, None) or _Reading()
        self._tasks[task_id] = reading  # the most recent last
        # The oldest go, except one still being read: dropped mid-read, the next ask would
        # start a second reading of the same events beside it.
        for old_id in [t for t, r in self._tasks.items() if not r.lock.locked()]:
            if len(self._tasks) <= self.keep:
                break
            del self._tasks[old_id]
        async with reading.lock:
            if reading.restarts == restarts:
                return reading.earlier
            while True:
                rows = await self.core.task_event_rows(task_id, reading.after, PAGE)
                for row in rows:
                    reading.apply(row)
                if len(rows) < PAGE:
                    break
            reading.restarts = restarts
            return reading.earlier


def with_earlier(row: Any, earlier: str, text: str) -> str:
    """The Output tab's text: the discarded run's output, marked, then this run's."""
    if not earlier:
        return text
    n = row["restarts"]
    head = (
        f"[Started over {n}× (on restart: {row['on_restart']}); "
        "the earlier run's output below was discarded]\n"
    )
    now = text
    if not now and row["state"] == TaskState.FAILED and row["error"]:
        error = json.loads(row["error"])
        now = f"(No output: the task failed ({error['code']}). {error['message']})"
    elif not now and row["state"] in (TaskState.QUEUED, TaskState.LOADING):
        now = "(Waiting in the queue to start over.)"
    return f"{head}{earlier}\n\n[This run]\n{now}"
