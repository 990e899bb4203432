"""A prototype of set-based recovery (proposed fix for B4): the same outcomes and events as
core/storage/recovery.py `recover`, but each batch of 500 leftovers is one SELECT and three
executemany statements under the write lock, instead of about eight awaited statements per
task (each an aiosqlite thread hand-off), and no per-task log lines."""

from __future__ import annotations

import json
import time
from typing import Any

from bench.aio_transaction import transaction
from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.states import RECOVERY_TABLE, UNFINISHED, RestartPolicy, TaskState
from lmsp_desktop.core.storage.events import close_item_events as _close_item_events
from lmsp_desktop.core.storage.events import with_response as _with_response
from lmsp_desktop.core.storage.recovery import (
    BATCH,
    ERROR_CODE,
    ERROR_MESSAGE,
    RecoveryItem,
    RecoveryReport,
)
from lmsp_desktop.core.storage.task_reads import JOINED
from lmsp_desktop.core.storage.tasks import TaskStore
from lmsp_desktop.core.views import TaskChange

EVENT_OF = {
    TaskState.FAILED: "response.failed",
    TaskState.CANCELLED: "response.cancelled",
    TaskState.QUEUED: "response.queued",
    TaskState.RUNNING: "response.resumed",
}


def _outcome(row: Any, boot: int, now: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The row after its transition, and the events the transition appends."""
    before = TaskState(row["state"])
    after = RECOVERY_TABLE[(before, RestartPolicy(row["on_restart"]))]
    new = dict(row)
    new.update(state=str(after), recovered_boot=boot)
    if after in (TaskState.FAILED, TaskState.CANCELLED):
        new.update(finished_at=now, snapshot=None)
        if after == TaskState.FAILED:
            new["error"] = json.dumps({"code": ERROR_CODE, "message": ERROR_MESSAGE})
        events = [
            *_close_item_events(new),  # type: ignore[arg-type]  # reads it as a mapping
            _with_response(EVENT_OF[after], build_response(new)),
        ]
    elif after == TaskState.QUEUED:
        new.update(
            restarts=row["restarts"] + 1,
            started_at=None,
            snapshot=None,
            item_id=None,
            output_text="",
            output_tokens=0,
        )
        events = [_with_response("response.queued", build_response(new))]
    else:
        new["restarts"] = row["restarts"] + 1
        events = [_with_response("response.resumed", build_response(new))]
    return new, events


async def recover_batched(store: TaskStore, boot: int) -> RecoveryReport:
    started = time.time()
    items: list[RecoveryItem] = []
    changes: list[TaskChange] = []
    states = sorted(map(str, UNFINISHED))
    marks = ",".join("?" * len(states))
    while True:
        async with transaction(store.db) as conn:
            # Read under the write lock: nothing can change these rows before the update.
            rows = await conn.execute_fetchall(
                JOINED + f" WHERE t.state IN ({marks}) AND t.recovered_boot IS NOT ? "
                "ORDER BY t.n LIMIT ?",
                (*states, boot, BATCH),
            )
            if not rows:
                break
            task_rows, response_rows, event_rows = [], [], []
            for row in rows:
                new, events = _outcome(row, boot, started)
                seq = row["last_seq"]
                for event in events:
                    seq += 1
                    event["sequence_number"] = seq
                    event_rows.append((row["id"], seq, event["type"], started, json.dumps(event)))
                new["last_seq"] = seq
                after = TaskState(new["state"])
                final = (
                    json.dumps(build_response(new))
                    if after in (TaskState.FAILED, TaskState.CANCELLED)
                    else None
                )
                task_rows.append(
                    (
                        new["state"],
                        boot,
                        new["finished_at"],
                        new["snapshot"],
                        new["restarts"],
                        new["started_at"],
                        seq,
                        row["id"],
                    )
                )
                response_rows.append(
                    (
                        new["error"],
                        new["item_id"],
                        new["output_text"],
                        new["output_tokens"],
                        final,
                        row["id"],
                    )
                )
                kind = EVENT_OF[after]
                items.append(
                    RecoveryItem(
                        row["id"],
                        row["model"],
                        row["state"],
                        row["on_restart"],
                        str(after),
                        kind,
                        seq,
                    )
                )
                changes.append(TaskChange(row["id"], after, seq, row["model"], (kind,)))
            await conn.executemany(
                "UPDATE tasks SET state=?, recovered_boot=?, finished_at=?, snapshot=?,"
                " restarts=?, started_at=?, last_seq=? WHERE id=?",
                task_rows,
            )
            await conn.executemany(
                "UPDATE responses SET error=?, item_id=?, output_text=?, output_tokens=?,"
                " final=COALESCE(?, final) WHERE id=?",
                response_rows,
            )
            await conn.executemany(
                "INSERT INTO task_events (task_id, seq, type, created_at, data) VALUES (?,?,?,?,?)",
                event_rows,
            )
    report = RecoveryReport(started, time.time(), items)
    if items:
        async with transaction(store.db) as conn:
            await conn.execute(
                "INSERT INTO recovery_reports (started_at, finished_at, items) VALUES (?,?,?)",
                (report.started_at, report.finished_at, json.dumps([i.__dict__ for i in items])),
            )
    store.publish(changes)
    return report
