"""Reading tasks and their event logs: every query on `tasks` and `task_events` that does
not change them, for the HTTP routes, the runner, the follower, the metrics and the window.

One filter (`TaskFilter`) and one list query serve `GET /v1/tasks` and the window's task
table alike; the queue position is computed by that query, not one query per row.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, cast

from lmsp_desktop.core.errors import not_found
from lmsp_desktop.core.states import TERMINAL, TaskState
from lmsp_desktop.core.storage.db import Database
from lmsp_desktop.core.storage.events import Row, response_of
from lmsp_desktop.core.views import TaskFilter

# A download's latest progress (JSON {bytes_done, bytes_total, bytes_per_s, …}; NULL for
# other kinds): its snapshot while it runs, a cancelled or failed one's last progress event
# (how far it got), else the total its request asked for (a completed, failed or cancelled
# one's snapshot is cleared at its end).
DOWNLOAD_PROGRESS = """CASE WHEN t.kind='download' THEN coalesce(
         t.snapshot,
         CASE WHEN t.state IN ('cancelled', 'failed') THEN
           (SELECT e.data FROM task_events e WHERE e.task_id = t.id
              AND e.type = 'download.progress' ORDER BY e.seq DESC LIMIT 1) END,
         json_object('bytes_total', json_extract(r.request, '$.bytes_total')))
       END"""

# A task with its response: what transitions, recovery and the response object read.
JOINED = f"""
SELECT t.n, t.id, t.client_id, t.model, t.state, t.on_restart, t.mode, t.created_at,
       t.recovered_boot, t.kind,
       t.started_at, t.finished_at, t.restarts, t.last_seq, t.snapshot,
       r.request, r.output_text, r.item_id, r.input_tokens, r.output_tokens, r.completed_at,
       r.error, r.incomplete_reason, r.output_items, r.cached_tokens, r.stop_sequence,
       r.embedding_dimensions,
       {DOWNLOAD_PROGRESS} AS progress
FROM tasks t JOIN responses r ON r.id = t.id
"""

# 1-based place of a queued task in its model's queue (None unless queued).
QUEUE_POSITION = """CASE WHEN t.state='queued' THEN
  (SELECT COUNT(*) FROM tasks q WHERE q.state='queued' AND q.model=t.model AND q.n<=t.n)
END"""

# Whether the task's output spans a restart, so that no speed can be told from its tokens and
# times (two runs, or a run and the recovery that ended it, with the downtime between):
# - recovery ended it (table 11.3's fail and cancel cells set recovered_boot and leave
#   restarts alone; a later run's failure by recovery says server_restarted);
# - its current run continues one from before a restart (it began with response.resumed,
#   not response.in_progress; only a restarted task's events are read, newest first).
ENDED_BY_RESTART = """(t.recovered_boot IS NOT NULL AND t.state IN ('failed', 'cancelled')
       AND (t.restarts = 0 OR json_extract(r.error, '$.code') = 'server_restarted'))"""
SPANS_RESTART = f"""CASE
  WHEN {ENDED_BY_RESTART} THEN 1
  WHEN t.restarts > 0 THEN
    IFNULL((SELECT e.type = 'response.resumed' FROM task_events e
            WHERE e.task_id = t.id AND e.type IN ('response.in_progress', 'response.resumed')
            ORDER BY e.seq DESC LIMIT 1), 0)
  ELSE 0 END"""

# The run a resumed task is on (its last start was a resume): when it began and the output
# tokens it began with, so the window shows that run's own speed ('[at, tokens]' or NULL).
RESUMED_RUN = """CASE WHEN t.restarts > 0 THEN
  (SELECT CASE WHEN e.type = 'response.resumed' THEN
            json_array(e.created_at,
                       IFNULL(json_extract(e.data, '$.response.usage.output_tokens'), 0)) END
   FROM task_events e
   WHERE e.task_id = t.id AND e.type IN ('response.in_progress', 'response.resumed')
   ORDER BY e.seq DESC LIMIT 1) END"""

# When a task ended by the recovery last did something in the run the restart stopped: its
# last event before the recovery's own (written in one transition, at one time: that of
# the last event; the items it closes are among them), not counting the events that only
# open a run (a start, an empty item); NULL when the run did nothing after its start.
RAN_UNTIL = f"""CASE WHEN {ENDED_BY_RESTART} AND t.started_at IS NOT NULL THEN
  (SELECT e.created_at FROM task_events e
   WHERE e.task_id = t.id AND e.created_at >= t.started_at
     AND e.created_at < (SELECT l.created_at FROM task_events l
                         WHERE l.task_id = t.id AND l.seq = t.last_seq)
     AND e.type NOT IN ('response.created', 'response.queued', 'response.loading',
                        'response.in_progress', 'response.resumed',
                        'response.output_item.added', 'response.content_part.added')
   ORDER BY e.seq DESC LIMIT 1) END"""

# A task as lists show it (the task object of the API, a row of the window's table): the
# client's name and the queue position; of the request only what the task object shows
# (its dropped tools, its notes), not the whole prompt, nor the output text.
LISTED = f"""
SELECT t.n, t.id, t.client_id, c.name AS client_name, t.model, t.state, t.on_restart, t.mode,
       t.kind, t.created_at, t.started_at, t.finished_at, t.first_token_at, t.last_seq,
       t.restarts, r.input_tokens, r.output_tokens, r.error, {QUEUE_POSITION} AS queue_position,
       {SPANS_RESTART} AS spans_restart, {RESUMED_RUN} AS resumed_run,
       {ENDED_BY_RESTART} AS ended_by_restart, {RAN_UNTIL} AS ran_until,
       r.incomplete_reason, json_extract(r.request, '$.max_output_tokens') AS output_limit,
       {DOWNLOAD_PROGRESS} AS progress,
       json_object('dropped_tools', json(json_extract(r.request, '$.dropped_tools')),
                   'notes', json(json_extract(r.request, '$.notes')),
                   'api', json_extract(r.request, '$.api'),
                   'store', json_extract(r.request, '$.store'))
         AS request
FROM tasks t JOIN responses r ON r.id = t.id LEFT JOIN clients c ON c.id = t.client_id
"""

# Sort keys of the window's columns; every order ends in submission order (stable pages).
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


def escape_like(text: str) -> str:
    """`text` for a LIKE pattern with ESCAPE '\\': `%` and `_` match themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def filter_where(flt: TaskFilter, *, scan_states: bool = False) -> tuple[list[str], list[Any]]:
    """SQL conditions and their parameters for `flt`. `scan_states`: for pages in task order,
    test the state on each row walked newest first ("+" keeps SQLite off the state index):
    the page is found after its own rows (43 ms at worst for 100k tasks), not after sorting
    every finished task (1.4 s)."""
    where: list[str] = []
    params: list[Any] = []
    if flt.states:
        state = "+t.state" if scan_states else "t.state"
        where.append(f"{state} IN ({','.join('?' for _ in flt.states)})")
        params.extend(flt.states)
    if flt.model:
        where.append("t.model=?")
        params.append(flt.model)
    if flt.client_id:
        where.append("t.client_id=?")
        params.append(flt.client_id)
    if flt.text:
        where.append(
            "(t.id LIKE ? ESCAPE '\\' OR t.model LIKE ? ESCAPE '\\'"
            " OR IFNULL(t.client_id,'') LIKE ? ESCAPE '\\'"
            " OR IFNULL(c.name,'') LIKE ? ESCAPE '\\')"
        )
        params.extend([f"%{escape_like(flt.text)}%"] * 4)
    return where, params


def _clause(where: list[str]) -> str:
    return (" WHERE " + " AND ".join(where)) if where else ""


def _not_found(task_id: str, client_id: str | None) -> Exception:
    """The 404 for an id the caller cannot see, on every route that takes a task's id
    (responses, chat completions, downloads, embeddings: any kind of task). For a client it
    reads the same whether the id is unknown or another client's task, which it must not
    reveal (LMSP_API.md: 404 unknown id or not yours); the code stays `response_not_found`,
    which clients already match (a response and its task share one id)."""
    if client_id is None:
        return not_found(
            f"No task with id {task_id!r}: GET /v1/tasks lists the tasks.", "response_not_found"
        )
    return not_found(
        f"No task with id {task_id!r} for this client: a client sees and cancels its own "
        "tasks only (an admin token, every client's). GET /v1/tasks lists this client's.",
        "response_not_found",
    )


# -- inside a write transaction -------------------------------------------------------------
def row_in(conn: sqlite3.Connection, task_id: str, client_id: str | None = None) -> Row:
    """The joined row of a task; 404 for unknown ids and, for non-admins, others' tasks."""
    row = conn.execute(JOINED + " WHERE t.id=?", (task_id,)).fetchone()
    if row is None or (client_id is not None and row["client_id"] != client_id):
        raise _not_found(task_id, client_id)
    return cast(Row, row)


def queue_length_in(conn: sqlite3.Connection, model: str) -> int:
    """How many tasks of `model` are queued, from the writer's running count (schema.py
    WRITER_TEMP_SCHEMA): the queue position of a task queued last, such as one just created."""
    row = conn.execute("SELECT queued FROM temp.queue_lengths WHERE model=?", (model,)).fetchone()
    return 0 if row is None else int(row[0])


class TaskReads:
    """The read side of the task store (the reader connection; never writes)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, task_id: str, client_id: str | None = None) -> Row:
        """The joined row of a task; 404 for unknown ids and, for non-admins, others' tasks."""
        row = await self.db.fetchone(JOINED + " WHERE t.id=?", (task_id,))
        if row is None or (client_id is not None and row["client_id"] != client_id):
            raise _not_found(task_id, client_id)
        return row

    async def queue_position(self, row: Row) -> int | None:
        if row["state"] != TaskState.QUEUED:
            return None
        found = await self.db.fetchone(
            f"SELECT {QUEUE_POSITION} FROM tasks t WHERE t.id=?", (row["id"],)
        )
        return None if found is None or found[0] is None else int(found[0])

    async def response_object(self, task_id: str, client_id: str | None = None) -> dict[str, Any]:
        row = await self.get(task_id, client_id)
        return response_of(row, await self.queue_position(row))

    async def events(self, task_id: str, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        rows = await self.db.fetchall(
            "SELECT data FROM task_events WHERE task_id=? AND seq>? ORDER BY seq LIMIT ?",
            (task_id, after, limit),
        )
        return [json.loads(r["data"]) for r in rows]

    async def event_rows(self, task_id: str, after: int = 0, limit: int = 1000) -> list[Row]:
        return await self.db.fetchall(
            "SELECT seq, type, created_at, data FROM task_events WHERE task_id=? AND seq>? "
            "ORDER BY seq LIMIT ?",
            (task_id, after, limit),
        )

    async def progress(self, task_id: str) -> tuple[TaskState, int] | None:
        """A task's state and last sequence number, or None when it is gone."""
        row = await self.db.fetchone("SELECT state, last_seq FROM tasks WHERE id=?", (task_id,))
        return None if row is None else (TaskState(row["state"]), int(row["last_seq"]))

    # -- lists ---------------------------------------------------------------------------
    async def list_tasks(
        self, flt: TaskFilter, *, after: str | None = None, limit: int = 20
    ) -> tuple[list[Row], bool]:
        """Tasks newest first (LISTED rows), paged by the id of the last task seen.
        Returns (rows, has_more)."""
        where, params = filter_where(flt)
        if after:
            anchor = await self.db.fetchone("SELECT n FROM tasks WHERE id=?", (after,))
            if anchor is None:
                raise not_found(
                    f"No task with id {after!r} to page after: pass the id of a listed task.",
                    "task_not_found",
                    param="after",
                )
            where.append("t.n<?")
            params.append(anchor["n"])
        rows = await self.db.fetchall(
            LISTED + _clause(where) + " ORDER BY t.n DESC LIMIT ?", (*params, limit + 1)
        )
        return rows[:limit], len(rows) > limit

    async def page(
        self,
        flt: TaskFilter,
        offset: int,
        limit: int,
        sort: str = "id",
        descending: bool = True,
    ) -> list[Row]:
        """A page of LISTED rows by offset, sorted by one of SORT_SQL's keys (the window).

        In two steps: the page's task numbers first, sorted on narrow rows, then LISTED's
        columns for those only. In one step SQLite computed every matching row's columns
        (json, subqueries) before sorting: 2.5 s for a page of 100k tasks sorted by model,
        while the window and the service waited for the reader."""
        where, params = filter_where(flt, scan_states=SORT_SQL.get(sort, "t.n") == "t.n")
        order = "DESC" if descending else "ASC"
        key = SORT_SQL.get(sort, "t.n")
        responses = " JOIN responses r ON r.id = t.id" if "r." in key else ""
        numbers = (
            f"SELECT t.n FROM tasks t{responses} LEFT JOIN clients c ON c.id = t.client_id"
            f"{_clause(where)} ORDER BY {key} {order}, t.n {order} LIMIT ? OFFSET ?"
        )
        sql = f"{LISTED} WHERE t.n IN ({numbers}) ORDER BY {key} {order}, t.n {order}"
        return await self.db.fetchall(sql, (*params, limit, offset))

    async def listed_by_id(self, ids: Sequence[str], flt: TaskFilter | None = None) -> list[Row]:
        """The given tasks as LISTED rows (those matching `flt`, when given), newest first."""
        if not ids:
            return []
        where, params = filter_where(flt or TaskFilter())
        where.insert(0, f"t.id IN ({','.join('?' for _ in ids)})")
        sql = f"{LISTED}{_clause(where)} ORDER BY t.n DESC"
        return await self.db.fetchall(sql, (*ids, *params))

    async def holding_item(self, item_id: str, client_id: str | None) -> list[Row]:
        """The caller's tasks that may hold an input or output item with this id (for
        `item_reference`): the response whose message item it is, else those whose stored
        request or output items mention it (the caller checks the exact match)."""
        owner, params = ("", ()) if client_id is None else (" AND t.client_id=?", (client_id,))
        rows = await self.db.fetchall(JOINED + " WHERE r.item_id=?" + owner, (item_id, *params))
        if rows:
            return rows
        pattern = f'%"{escape_like(item_id)}"%'
        # Output items of ended tasks only: a running task's function call may still be
        # half-written (its arguments streaming), and its item would read as complete.
        ended = ",".join("?" for _ in TERMINAL)
        return await self.db.fetchall(
            JOINED
            + " WHERE (r.request LIKE ? ESCAPE '\\'"
            + f" OR (r.output_items LIKE ? ESCAPE '\\' AND t.state IN ({ended})))"
            + owner
            + " ORDER BY t.n DESC LIMIT 50",
            (pattern, pattern, *map(str, TERMINAL), *params),
        )

    async def unfinished(
        self, states: Sequence[TaskState], kinds: Sequence[str] | None = None
    ) -> list[Row]:
        """The joined rows of the tasks in `states` (of `kinds`, when given), oldest first."""
        marks = ",".join("?" for _ in states)
        of_kind = f" AND t.kind IN ({','.join('?' for _ in kinds)})" if kinds else ""
        return await self.db.fetchall(
            JOINED + f" WHERE t.state IN ({marks}){of_kind} ORDER BY t.n",
            (*map(str, states), *(kinds or ())),
        )

    async def models_with(self, states: Sequence[TaskState], kinds: Sequence[str]) -> list[str]:
        """The models with tasks of `kinds` in `states`, the one whose oldest such task is
        oldest first (at startup: which models have work, without reading every task)."""
        state_marks = ",".join("?" for _ in states)
        kind_marks = ",".join("?" for _ in kinds)
        rows = await self.db.fetchall(
            f"SELECT model FROM tasks WHERE state IN ({state_marks}) AND kind IN ({kind_marks})"
            " GROUP BY model ORDER BY MIN(n)",
            (*map(str, states), *kinds),
        )
        return [str(row["model"]) for row in rows]

    async def next_runnable(self, model: str, limit: int) -> list[str]:
        """Ids of a model's tasks a lane may run, in order: resumed running tasks first (they
        were started before), then the oldest queued."""
        rows = await self.db.fetchall(
            "SELECT id FROM tasks WHERE model=? AND state IN ('running','queued') "
            "AND kind IN ('response', 'embedding') ORDER BY state='queued', n LIMIT ?",
            (model, limit),
        )
        return [str(r["id"]) for r in rows]

    # -- counts --------------------------------------------------------------------------
    async def count(self) -> int:
        row = await self.db.fetchone("SELECT COUNT(*) AS c FROM tasks")
        return int(row["c"]) if row else 0

    async def counts(self) -> dict[str, int]:
        rows = await self.db.fetchall("SELECT state, COUNT(*) AS c FROM tasks GROUP BY state")
        return {r["state"]: r["c"] for r in rows}

    async def stored_totals(self) -> tuple[int, int]:
        """(events, output tokens) kept in the store, for the metrics."""
        row = await self.db.fetchone(
            "SELECT COALESCE(SUM(last_seq), 0) AS events, "
            "(SELECT COALESCE(SUM(output_tokens), 0) FROM responses) AS tokens FROM tasks"
        )
        return (int(row["events"]), int(row["tokens"])) if row else (0, 0)
