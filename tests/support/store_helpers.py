"""Task factories and the store invariants every test of the task state machine checks."""

from __future__ import annotations

import json
import sqlite3
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.states import STATE_OF_EVENT, RestartPolicy, TaskState
from lmsp_desktop.core.storage import db as db_module
from lmsp_desktop.core.storage.events import DELTA
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask, TaskStore


def request(**extra: Any) -> dict[str, Any]:
    """A normalised request as the service stores it (sampling values filled in)."""
    return {"input": "hi", "temperature": 0.0, "top_p": 1.0, "background": True, **extra}


def new_task(
    model: str = "m",
    on_restart: RestartPolicy | str = RestartPolicy.FAIL,
    mode: str = "background",
    client_id: str | None = None,
) -> NewTask:
    return NewTask(
        model=model,
        request=request(),
        on_restart=RestartPolicy(on_restart),
        mode=mode,
        client_id=client_id,
    )


async def create(tasks: TaskStore, **kwargs: Any) -> str:
    return (await tasks.create(new_task(**kwargs))).task_id


async def drive(tasks: TaskStore, state: TaskState, **kwargs: Any) -> str:
    """A new task brought to `state` through the store's own transitions."""
    task_id = await create(tasks, **kwargs)
    if state == TaskState.QUEUED:
        return task_id
    if state == TaskState.CANCELLED:
        await tasks.cancel(task_id)
        return task_id
    assert await tasks.mark_loading(task_id)
    if state == TaskState.LOADING:
        return task_id
    if state == TaskState.FAILED:
        assert await tasks.fail(task_id, "engine_error", "boom")
        return task_id
    assert await tasks.mark_running(task_id)
    assert await tasks.append_deltas(
        task_id, ["Hel", "lo"], output_tokens=2, input_tokens=3, snapshot={"tokens": [1, 2]}
    )
    if state == TaskState.RUNNING:
        return task_id
    if state == TaskState.CANCELLING:
        await tasks.cancel(task_id)
        return task_id
    if state in (TaskState.COMPLETED, TaskState.INCOMPLETE):
        reason = "max_output_tokens" if state == TaskState.INCOMPLETE else None
        assert await tasks.finish(
            task_id, incomplete_reason=reason, input_tokens=3, output_tokens=2
        )
        return task_id
    raise AssertionError(state)


# Every state change the task state machine may make (LMSP_API.md, table 11.3). A terminal
# state is never left.
ALLOWED_CHANGES = {
    ("queued", "loading"),
    ("queued", "running"),
    ("queued", "cancelled"),
    ("queued", "failed"),
    ("loading", "running"),
    ("loading", "cancelling"),
    ("loading", "failed"),
    ("loading", "queued"),
    ("running", "cancelling"),
    ("running", "completed"),
    ("running", "incomplete"),
    ("running", "failed"),
    ("running", "queued"),
    ("cancelling", "cancelled"),
}

ITEM_EVENT_PREFIXES = ("response.output_item.", "response.content_part.", "response.output_text.")


def check_invariants(db_path: Path) -> dict[str, sqlite3.Row]:
    """Assert the rules of 11.2 on the file itself; return the task rows by id.

    Every task has a response; its events are numbered 1..last_seq with no gap; each event's
    JSON carries its own sequence number and type; the first event is `response.created`;
    every state change in the log is a legal one; and the task's state is the one its last
    event implies.
    """
    conn = sqlite3.connect(db_path)
    conn.row_factory = sqlite3.Row
    try:
        tasks = {
            r["id"]: r
            for r in conn.execute(
                "SELECT t.*, r.output_text, r.error, r.item_id FROM tasks t "
                "JOIN responses r ON r.id = t.id"
            )
        }
        (n_tasks,) = conn.execute("SELECT COUNT(*) FROM tasks").fetchone()
        (n_responses,) = conn.execute("SELECT COUNT(*) FROM responses").fetchone()
        assert n_tasks == len(tasks) == n_responses, "a task or response lost its partner"
        events: dict[str, list[sqlite3.Row]] = {}
        for ev in conn.execute("SELECT task_id, seq, type, data FROM task_events ORDER BY 1, 2"):
            events.setdefault(ev["task_id"], []).append(ev)
        assert set(events) <= set(tasks), "events of a task that does not exist"
        for task_id, row in tasks.items():
            log = events.get(task_id, [])
            seqs = [e["seq"] for e in log]
            assert seqs == list(range(1, row["last_seq"] + 1)), (
                f"{task_id}: sequence numbers {seqs} but last_seq {row['last_seq']}"
            )
            for e in log:
                data = json.loads(e["data"])
                assert data["sequence_number"] == e["seq"]
                assert data["type"] == e["type"]
            assert log[0]["type"] == "response.created"
            # Item, part and text events describe output, not a state change: the closing
            # ones are written with the terminal event, after a cancel too.
            states = [
                STATE_OF_EVENT[e["type"]]
                for e in log
                if not e["type"].startswith(ITEM_EVENT_PREFIXES)
            ]
            for before, after in pairwise(states):
                assert before == after or (before, after) in ALLOWED_CHANGES, (
                    f"{task_id}: illegal change {before} -> {after} in {[e['type'] for e in log]}"
                )
            implied = STATE_OF_EVENT[log[-1]["type"]]
            assert row["state"] == implied, (
                f"{task_id}: state {row['state']} but last event {log[-1]['type']}"
            )
        return tasks
    finally:
        conn.close()


def event_types(db_path: Path, task_id: str) -> list[str]:
    conn = sqlite3.connect(db_path)
    try:
        return [
            r[0]
            for r in conn.execute(
                "SELECT type FROM task_events WHERE task_id=? ORDER BY seq", (task_id,)
            )
        ]
    finally:
        conn.close()


def dump(db_path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the task tables, to prove that a refused operation wrote nothing."""
    conn = sqlite3.connect(db_path)
    try:
        return {
            table: [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]
            for table in ("tasks", "responses", "task_events", "idempotency_keys")
        }
    finally:
        conn.close()


def units_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The writer's transactions, each as its number of units of work."""
    units: list[int] = []
    original = db_module._run_group

    def run_group(conn: sqlite3.Connection, works: list[Any], **kw: Any) -> Any:
        units.append(len(works))
        return original(conn, works, **kw)

    monkeypatch.setattr(db_module, "_run_group", run_group)
    return units


def deltas_of(store: Store, task_id: str) -> list[str]:
    """The text deltas of a task that another connection sees: only what is committed."""
    conn = sqlite3.connect(store.db.path)
    try:
        rows = conn.execute(
            "SELECT data FROM task_events WHERE task_id=? AND type=? ORDER BY seq", (task_id, DELTA)
        ).fetchall()
    finally:
        conn.close()
    return [json.loads(data)["delta"] for (data,) in rows]
