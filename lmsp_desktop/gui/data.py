"""Read-only queries the window needs that the core does not offer (yet): task pages, clients.

Everything here is a plain SELECT through `Database.fetchall` (the reader connection), so
the GUI never writes around the core's transitions.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.db import Database

TASK_SELECT = """
SELECT t.n, t.id, t.client_id, c.name AS client_name, t.model, t.state, t.on_restart,
       t.created_at, t.started_at, t.finished_at, t.last_seq, t.restarts,
       r.output_tokens, r.error,
       CASE WHEN t.state='queued' THEN
         (SELECT COUNT(*) FROM tasks q WHERE q.state='queued' AND q.model=t.model AND q.n<=t.n)
       END AS queue_position
FROM tasks t JOIN responses r ON r.id = t.id LEFT JOIN clients c ON c.id = t.client_id
"""

ACTIVE = (TaskState.QUEUED, TaskState.LOADING, TaskState.RUNNING, TaskState.CANCELLING)
STATE_FILTERS: dict[str, tuple[str, ...]] = {
    "All": (),
    "Active": tuple(ACTIVE),
    "Queued": (TaskState.QUEUED,),
    "Running": (TaskState.LOADING, TaskState.RUNNING, TaskState.CANCELLING),
    "Finished": (TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.CANCELLED),
    "Failed": (TaskState.FAILED,),
}

# Sort keys by column name; every one ends in the submission order so pages are stable.
SORT_SQL = {
    "id": "t.n",
    "created": "t.n",
    "client": "IFNULL(c.name, t.client_id)",
    "model": "t.model",
    "state": "t.state",
    "on_restart": "t.on_restart",
    "tokens": "r.output_tokens",
    "last_seq": "t.last_seq",
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
        )

    def duration(self, now: float | None = None) -> float | None:
        if self.started_at is None:
            return None
        return max(0.0, (self.finished_at or now or time.time()) - self.started_at)

    def tokens_per_second(self, now: float | None = None) -> float | None:
        spent = self.duration(now)
        if not spent or not self.output_tokens:
            return None
        return self.output_tokens / spent


@dataclass(frozen=True)
class TaskFilter:
    """What the tasks table shows: a set of states (empty: all) and a text to search."""

    states: tuple[str, ...] = ()
    text: str = ""

    def where(self) -> tuple[list[str], list[Any]]:
        where: list[str] = []
        params: list[Any] = []
        if self.states:
            where.append(f"t.state IN ({','.join('?' for _ in self.states)})")
            params.extend(self.states)
        if self.text:
            where.append(
                "(t.id LIKE ? OR t.model LIKE ? OR IFNULL(t.client_id,'') LIKE ?"
                " OR IFNULL(c.name,'') LIKE ?)"
            )
            params.extend([f"%{self.text}%"] * 4)
        return where, params


async def task_page(
    db: Database,
    flt: TaskFilter,
    offset: int,
    limit: int,
    sort: str = "id",
    descending: bool = True,
) -> list[TaskRow]:
    where, params = flt.where()
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    order = "DESC" if descending else "ASC"
    key = SORT_SQL.get(sort, "t.n")
    sql = f"{TASK_SELECT}{clause} ORDER BY {key} {order}, t.n {order} LIMIT ? OFFSET ?"
    rows = await db.fetchall(sql, (*params, limit, offset))
    return [TaskRow.of(r) for r in rows]


async def tasks_by_id(
    db: Database, ids: Sequence[str], flt: TaskFilter | None = None
) -> list[TaskRow]:
    """The given tasks (those matching `flt`, when given), newest first."""
    if not ids:
        return []
    where, params = (flt or TaskFilter()).where()
    where.insert(0, f"t.id IN ({','.join('?' for _ in ids)})")
    sql = f"{TASK_SELECT} WHERE {' AND '.join(where)} ORDER BY t.n DESC"
    rows = await db.fetchall(sql, (*ids, *params))
    return [TaskRow.of(r) for r in rows]


async def task_count(db: Database) -> int:
    row = await db.fetchone("SELECT COUNT(*) AS c FROM tasks")
    return int(row["c"]) if row else 0
