"""The window's view of tasks: its rows and state filters, read through the store's one
task list query (core/storage/task_reads.py), which `/v1/tasks` uses too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lmsp_desktop.core.states import UNFINISHED, TaskState
from lmsp_desktop.core.storage.db import Database
from lmsp_desktop.core.storage.task_reads import TaskFilter as TaskFilter
from lmsp_desktop.core.storage.task_reads import TaskReads

ACTIVE = tuple(state for state in TaskState if state in UNFINISHED)  # the core's set
STATE_FILTERS: dict[str, tuple[str, ...]] = {
    "All": (),
    "Active": tuple(ACTIVE),
    "Queued": (TaskState.QUEUED,),
    "Running": (TaskState.LOADING, TaskState.RUNNING, TaskState.CANCELLING),
    "Finished": (TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.CANCELLED),
    "Failed": (TaskState.FAILED,),
}


@dataclass
class TaskRow:
    """One row of the tasks table, as read from the store."""

    n: int
    id: str
    client: str
    model: str
    state: str
    on_restart: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    last_seq: int
    output_tokens: int
    queue_position: int | None
    error: dict[str, Any] | None
    # Its output spans a restart (resumed from a snapshot, or ended by the recovery): the
    # tokens and times include the downtime, so it has no honest speed.
    spans_restart: bool = False
    # A download (kind `download`): its latest progress {bytes_done, bytes_total,
    # bytes_per_s}, shown instead of tokens; None for responses and before the first bytes.
    kind: str = "response"
    progress: dict[str, Any] | None = None

    @classmethod
    def of(cls, row: Any) -> TaskRow:
        return cls(
            n=row["n"],
            id=row["id"],
            client=row["client_name"] or row["client_id"] or "desktop",
            model=row["model"],
            state=row["state"],
            on_restart=row["on_restart"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            last_seq=row["last_seq"],
            output_tokens=row["output_tokens"],
            queue_position=row["queue_position"],
            error=json.loads(row["error"]) if row["error"] else None,
            spans_restart=bool(row["spans_restart"]),
            kind=row["kind"],
            progress=json.loads(row["progress"]) if row["progress"] else None,
        )

    def duration(self, now: float | None = None) -> float | None:
        if self.started_at is None:
            return None
        return max(0.0, (self.finished_at or now or time.time()) - self.started_at)

    def download_fraction(self) -> float | None:
        """How much of a download is on disk (0..1); None for other tasks or no total."""
        if self.kind != "download" or not self.progress:
            return None
        total = self.progress.get("bytes_total") or 0
        return min(1.0, self.progress.get("bytes_done", 0) / total) if total else None

    def seconds_left(self) -> float | None:
        """A running download's time left at its current speed."""
        if self.kind != "download" or not self.progress or self.finished_at is not None:
            return None
        speed = self.progress.get("bytes_per_s")
        left = (self.progress.get("bytes_total") or 0) - self.progress.get("bytes_done", 0)
        return left / speed if speed and left >= 0 else None

    def tokens_per_second(self, now: float | None = None) -> float | None:
        """Output tokens per second of its run; None before any, and for output that spans a
        restart (tokens from before it over a time that includes the downtime)."""
        if self.spans_restart:
            return None
        spent = self.duration(now)
        if not spent or not self.output_tokens:
            return None
        return self.output_tokens / spent


async def task_page(
    db: Database,
    flt: TaskFilter,
    offset: int,
    limit: int,
    sort: str = "id",
    descending: bool = True,
) -> list[TaskRow]:
    rows = await TaskReads(db).page(flt, offset, limit, sort, descending)
    return [TaskRow.of(r) for r in rows]


async def tasks_by_id(
    db: Database, ids: Sequence[str], flt: TaskFilter | None = None
) -> list[TaskRow]:
    """The given tasks (those matching `flt`, when given), newest first."""
    return [TaskRow.of(r) for r in await TaskReads(db).listed_by_id(ids, flt)]


async def task_count(db: Database) -> int:
    return await TaskReads(db).count()
