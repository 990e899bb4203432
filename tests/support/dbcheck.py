"""Read-only snapshots of a service's SQLite file and the chapter 11 invariants over them.

The crash loop opens the database file directly (never through the service) right after a
SIGKILL and again while the restarted service runs, so what it checks is what is on disk.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmsp_desktop.core.states import RECOVERY_TABLE, STATE_OF_EVENT, RestartPolicy, TaskState

UNFINISHED = {"queued", "loading", "running", "cancelling"}
# Events a recovery (or any terminal transition) writes to close an open output item
# before its own event, in the same transaction.
CLOSE_ITEM = {
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
}
RECOVERY_EVENT = {
    "failed": "response.failed",
    "cancelled": "response.cancelled",
    "queued": "response.queued",
    "running": "response.resumed",
}


@dataclass
class TaskSnap:
    id: str
    state: str
    on_restart: str
    mode: str
    last_seq: int
    client_id: str | None
    seqs: list[int] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    error_code: str | None = None


@dataclass
class Snapshot:
    """Every task with its event log, the idempotency keys, and the integrity check."""

    tasks: dict[str, TaskSnap]
    keys: dict[tuple[str, str], tuple[str, str | None]]  # (client, key) → (state, task id)
    integrity: str

    def unfinished(self) -> dict[str, TaskSnap]:
        return {k: t for k, t in self.tasks.items() if t.state in UNFINISHED}


def connect_readonly(db_path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def take_snapshot(db_path: Path, *, integrity: bool = True) -> Snapshot:
    """One consistent read transaction over the whole file."""
    conn = connect_readonly(db_path)
    try:
        conn.execute("BEGIN")
        tasks: dict[str, TaskSnap] = {}
        for row in conn.execute(
            "SELECT t.id, t.state, t.on_restart, t.mode, t.last_seq, t.client_id, r.error "
            "FROM tasks t JOIN responses r ON r.id = t.id"
        ):
            error = json.loads(row["error"]) if row["error"] else None
            tasks[row["id"]] = TaskSnap(
                row["id"],
                row["state"],
                row["on_restart"],
                row["mode"],
                row["last_seq"],
                row["client_id"],
                error_code=error.get("code") if error else None,
            )
        orphans: list[str] = []
        for row in conn.execute("SELECT task_id, seq, type FROM task_events ORDER BY task_id, seq"):
            task = tasks.get(row["task_id"])
            if task is None:
                orphans.append(row["task_id"])
                continue
            task.seqs.append(row["seq"])
            task.types.append(row["type"])
        keys = {
            (row["client_id"], row["key"]): (row["state"], row["task_id"])
            for row in conn.execute("SELECT client_id, key, state, task_id FROM idempotency_keys")
        }
        check = "ok"
        if integrity:
            rows = conn.execute("PRAGMA integrity_check").fetchall()
            check = "; ".join(str(r[0]) for r in rows)
        conn.execute("COMMIT")
    finally:
        conn.close()
    snap = Snapshot(tasks, keys, check)
    if orphans:
        snap.integrity += f"; events without a task: {sorted(set(orphans))[:3]}"
    return snap


def invariant_violations(snap: Snapshot) -> list[str]:
    """Rule 11.2 as seen on disk: gapless unique sequence numbers, the task row's last
    sequence number and state agreeing with its last event, never cancelled and completed."""
    problems: list[str] = []
    if snap.integrity != "ok":
        problems.append(f"integrity_check: {snap.integrity}")
    for task in snap.tasks.values():
        if task.seqs != list(range(1, len(task.seqs) + 1)):
            problems.append(f"{task.id}: sequence numbers not gapless from 1: {task.seqs[:20]}")
        if not task.seqs or task.seqs[-1] != task.last_seq:
            problems.append(
                f"{task.id}: last_seq {task.last_seq} but events end at "
                f"{task.seqs[-1] if task.seqs else None}"
            )
        if not task.types or task.types[0] != "response.created":
            problems.append(f"{task.id}: first event is {task.types[:1]}, not response.created")
            continue
        implied = STATE_OF_EVENT.get(task.types[-1])
        if implied is None or implied.value != task.state:
            problems.append(f"{task.id}: state {task.state} but last event {task.types[-1]}")
        if "response.cancelled" in task.types and "response.completed" in task.types:
            problems.append(f"{task.id}: both response.cancelled and response.completed")
        terminal = [
            t
            for t in task.types
            if STATE_OF_EVENT.get(t)
            in (TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.CANCELLED, TaskState.FAILED)
        ]
        if len(terminal) > 1:
            problems.append(f"{task.id}: more than one terminal event: {terminal}")
    return problems


def recovery_violations(
    before: Snapshot, report: dict[str, Any] | None, after: Snapshot
) -> list[str]:
    """Table 11.3: every task left unfinished on disk at the kill got its policy's outcome,
    reported by GET /v1/recovery/last and written as the event the report names."""
    problems: list[str] = []
    leftovers = before.unfinished()
    items = {i["task_id"]: i for i in (report or {}).get("items", [])} if leftovers else {}
    if leftovers and set(items) != set(leftovers):
        problems.append(
            f"recovery report covers {len(items)} tasks, {len(leftovers)} were left: "
            f"missing {sorted(set(leftovers) - set(items))[:3]}, "
            f"extra {sorted(set(items) - set(leftovers))[:3]}"
        )
    for task_id, was in leftovers.items():
        expected = RECOVERY_TABLE[(TaskState(was.state), RestartPolicy(was.on_restart))].value
        item = items.get(task_id)
        now = after.tasks.get(task_id)
        if now is None:
            problems.append(f"{task_id}: left {was.state}, gone after the restart")
            continue
        if item is not None:
            got = (
                item["state_before"],
                item["on_restart"],
                item["state_after"],
                item["event_type"],
            )
            want = (was.state, was.on_restart, expected, RECOVERY_EVENT[expected])
            if got != want:
                problems.append(f"{task_id}: recovery reported {got}, table 11.3 says {want}")
        event_type = RECOVERY_EVENT[expected]
        tail = now.types[was.last_seq :]
        if event_type not in tail:
            problems.append(
                f"{task_id}: left {was.state}/{was.on_restart}, no {event_type} "
                f"after #{was.last_seq}: {tail[:5]}"
            )
            continue
        position = tail.index(event_type)
        if any(t not in CLOSE_ITEM for t in tail[:position]):
            problems.append(f"{task_id}: events before {event_type}: {tail[:position]}")
        if item is not None and item["sequence_number"] != was.last_seq + position + 1:
            problems.append(
                f"{task_id}: report says #{item['sequence_number']}, log has "
                f"{event_type} at #{was.last_seq + position + 1}"
            )
        if expected == "failed" and now.error_code != "server_restarted":
            problems.append(f"{task_id}: failed at restart with {now.error_code}")
        if expected in ("failed", "cancelled") and now.state != expected:
            problems.append(f"{task_id}: should stay {expected}, is {now.state}")
    for task_id, was in before.tasks.items():
        now = after.tasks.get(task_id)
        if was.state not in UNFINISHED and now is not None and now.types != was.types:
            problems.append(f"{task_id}: finished ({was.state}) but its log changed at restart")
    return problems
