"""A prototype of group commit for the store (proposed fix for B1 and B2).

Callers queue their create or append; one writer coroutine commits everything queued so far
in one transaction (one fsync), then answers each caller. A caller still hears back only
after its own rows are committed, so "202 only after commit" and rule 11.2 hold: each task's
state check, its events, its gapless sequence numbers and its snapshot share one
transaction. The statements are batched with executemany, so a batch costs about ten
aiosqlite round trips whatever its size, instead of seven or eight per caller.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

from bench.aio_transaction import transaction
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.db import Database
from lmsp_desktop.core.storage.events import response_of
from lmsp_desktop.core.storage.events import with_response as _with_response
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim
from lmsp_desktop.core.storage.task_reads import JOINED
from lmsp_desktop.core.storage.tasks import (
    CreateResult,
    NewTask,
    TaskChange,
    TaskStore,
)

MAX_BATCH = 500  # bounds one transaction (and the SQL variable count of IN (...))

_Append = tuple[str, Sequence[str], int, int, "dict[str, Any] | None"]


class _Queue:
    """Items waiting for the writer, each with the future its caller awaits."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, asyncio.Future[Any]]] = []
        self.writer: asyncio.Task[None] | None = None


class GroupCommitTaskStore(TaskStore):
    """TaskStore whose `create` (without idempotency key) and `append_deltas` commit in
    groups."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._creates = _Queue()
        self._appends = _Queue()
        self.batches: list[int] = []  # sizes of committed groups (for the bench's report)

    # -- the queueing front ------------------------------------------------------------
    async def create(
        self, spec: NewTask, idempotency: IdempotencyClaim | None = None
    ) -> CreateResult:
        if idempotency is not None:
            return await super().create(spec, idempotency)
        result: CreateResult = await self._enqueue(self._creates, spec, self._commit_creates)
        return result

    async def append_deltas(
        self,
        task_id: str,
        deltas: Sequence[str],
        *,
        output_tokens: int,
        input_tokens: int,
        snapshot: dict[str, Any] | None,
    ) -> bool:
        if not deltas:
            return True
        item: _Append = (task_id, deltas, output_tokens, input_tokens, snapshot)
        ok: bool = await self._enqueue(self._appends, item, self._commit_appends)
        return ok

    async def _enqueue(self, queue: _Queue, item: Any, commit: Any) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queue.items.append((item, future))
        if queue.writer is None or queue.writer.done():
            queue.writer = asyncio.create_task(self._write(queue, commit))
        return await future

    async def _write(self, queue: _Queue, commit: Any) -> None:
        while queue.items:
            batch, queue.items = queue.items[:MAX_BATCH], queue.items[MAX_BATCH:]
            try:
                results, changes = await commit([item for item, _ in batch])
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            self.batches.append(len(batch))
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():  # a caller that gave up still had its rows committed
                    future.set_result(result)
            self.publish(changes)

    # -- the group transactions --------------------------------------------------------
    async def _commit_creates(
        self, specs: list[NewTask]
    ) -> tuple[list[CreateResult], list[TaskChange]]:
        now = int(time.time())
        ids = [s.id for s in specs]
        marks = ",".join("?" * len(ids))
        async with transaction(self.db) as conn:
            # Queue positions: those queued before this group, plus the rank inside it.
            counts = await conn.execute_fetchall(
                "SELECT model, COUNT(*) FROM tasks WHERE state='queued' GROUP BY model"
            )
            ahead = {model: int(count) for model, count in counts}
            await conn.executemany(
                "INSERT INTO responses (id, created_at, model, request) VALUES (?, ?, ?, ?)",
                [(s.id, now, s.model, json.dumps(s.request)) for s in specs],
            )
            await conn.executemany(
                "INSERT INTO tasks (id, client_id, model, state, on_restart, mode, created_at,"
                " last_seq) VALUES (?, ?, ?, 'queued', ?, ?, ?, 0)",
                [(s.id, s.client_id, s.model, str(s.on_restart), s.mode, now) for s in specs],
            )
            rows = {
                r["id"]: r
                for r in await conn.execute_fetchall(JOINED + f" WHERE t.id IN ({marks})", ids)
            }
            bodies, events = [], []
            created = time.time()
            for spec in specs:
                ahead[spec.model] = ahead.get(spec.model, 0) + 1
                body = response_of(rows[spec.id], ahead[spec.model])
                event = _with_response("response.created", body)
                event["sequence_number"] = 1
                events.append((spec.id, 1, "response.created", created, json.dumps(event)))
                body["task"]["last_sequence_number"] = 1
                bodies.append(body)
            await conn.executemany(
                "INSERT INTO task_events (task_id, seq, type, created_at, data) VALUES (?,?,?,?,?)",
                events,
            )
            await conn.execute(f"UPDATE tasks SET last_seq=1 WHERE id IN ({marks})", ids)
        results = [
            CreateResult(s.id, 202 if s.mode == "background" else 200, b)
            for s, b in zip(specs, bodies, strict=True)
        ]
        changes = [
            TaskChange(s.id, TaskState.QUEUED, 1, s.model, ("response.created",)) for s in specs
        ]
        return results, changes

    async def _commit_appends(self, items: list[_Append]) -> tuple[list[bool], list[TaskChange]]:
        ids = sorted({item[0] for item in items})
        marks = ",".join("?" * len(ids))
        now = time.time()
        async with transaction(self.db) as conn:
            found = await conn.execute_fetchall(
                "SELECT t.id, t.state, t.last_seq, t.model, r.item_id FROM tasks t "
                f"JOIN responses r ON r.id = t.id WHERE t.id IN ({marks})",
                ids,
            )
            tasks = {r["id"]: {"state": r["state"], "seq": r["last_seq"], "row": r} for r in found}
            results: list[bool] = []
            changes: list[TaskChange] = []
            event_rows, task_rows, response_rows = [], [], []
            for task_id, deltas, output_tokens, input_tokens, snapshot in items:
                task = tasks.get(task_id)
                # The compare-and-set of append_deltas: only a running task takes deltas (a
                # committed cancel wins), read and written under the same write lock.
                if task is None or task["state"] != TaskState.RUNNING:
                    results.append(False)
                    continue
                seq = task["seq"]
                item_id = task["row"]["item_id"]
                for delta in deltas:
                    seq += 1
                    event = {
                        "type": "response.output_text.delta",
                        "item_id": item_id,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": delta,
                        "sequence_number": seq,
                    }
                    event_rows.append((task_id, seq, event["type"], now, json.dumps(event)))
                task["seq"] = seq
                task_rows.append(
                    (json.dumps(snapshot) if snapshot is not None else None, seq, task_id)
                )
                response_rows.append(("".join(deltas), output_tokens, input_tokens, task_id))
                results.append(True)
                changes.append(
                    TaskChange(
                        task_id,
                        TaskState.RUNNING,
                        seq,
                        task["row"]["model"],
                        ("response.output_text.delta",),
                    )
                )
            if event_rows:
                await conn.executemany(
                    "INSERT INTO task_events (task_id, seq, type, created_at, data) "
                    "VALUES (?,?,?,?,?)",
                    event_rows,
                )
                await conn.executemany(
                    "UPDATE tasks SET snapshot=?, last_seq=? WHERE id=?", task_rows
                )
                await conn.executemany(
                    "UPDATE responses SET output_text = output_text || ?, output_tokens=?,"
                    " input_tokens=? WHERE id=?",
                    response_rows,
                )
        return results, changes
