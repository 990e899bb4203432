"""Builds large databases fast: raw sqlite3 inserts in the real schema (schema.py), with
rows shaped like the ones the store writes (real request JSON, gapless event logs)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.storage.schema import CURRENT_VERSION, MIGRATIONS

UNFINISHED_STATES = ("queued", "loading", "running", "cancelling")
POLICIES = ("fail", "retry", "resume")
FIRST_FAKE_TOKEN = 1000  # FakeEngine's token ids, so resumed tasks replay a valid prefix


@dataclass
class Shape:
    """How many tasks, of which unfinished, with how many events each."""

    tasks: int
    events_per_task: int
    unfinished: int = 0
    finished_age_days: float = 0.0  # how long ago the finished tasks finished
    model: str = "bench-model"


def open_raw(data_dir: Path) -> sqlite3.Connection:
    """A new database in the real schema, opened for bulk loading (no fsync: it is a
    fixture, and the bench measures what the service does with it afterwards)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = database_path(data_dir)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")
    for script in MIGRATIONS:
        conn.executescript(script)
    conn.execute(f"PRAGMA user_version={CURRENT_VERSION}")
    return conn


def seed(data_dir: Path, shape: Shape) -> int:
    """Fill a new database in `data_dir`. Returns the number of events written."""
    conn = open_raw(data_dir)
    request = parse_create(
        {"model": shape.model, "input": "Tell me about the sea.", "background": True}, "fail"
    )
    request_json = json.dumps(request)
    now = time.time()
    finished_at = now - shape.finished_age_days * 86400
    created = int(finished_at) - 60
    events = 0
    batch = 5000
    conn.execute("BEGIN")
    for first in range(0, shape.tasks, batch):
        responses, tasks, rows = [], [], []
        for n in range(first, min(first + batch, shape.tasks)):
            task_id = f"resp_bench{n:010d}"
            item_id = f"msg_bench{n:010d}"
            unfinished = n >= shape.tasks - shape.unfinished
            if unfinished:
                state = UNFINISHED_STATES[n % 4]
                policy = POLICIES[(n // 4) % 3]
            else:
                state, policy = "completed", POLICIES[n % 3]
            has_item = state in ("running", "cancelling", "completed")
            log = _event_log(
                task_id, item_id if has_item else None, state, shape.events_per_task, created
            )
            deltas = sum(1 for e in log if e[2] == "response.output_text.delta")
            text = "".join(f" w{i}" for i in range(deltas))
            snapshot = (
                json.dumps({"tokens": [FIRST_FAKE_TOKEN + i for i in range(deltas)], "seed": 7})
                if state == "running"
                else None
            )
            events += len(log)
            responses.append(
                (
                    task_id,
                    created,
                    shape.model,
                    request_json,
                    text,
                    item_id if has_item else None,
                    12,
                    deltas,
                    None if unfinished else int(finished_at),
                )
            )
            tasks.append(
                (
                    task_id,
                    shape.model,
                    state,
                    policy,
                    created,
                    created + 1 if has_item else None,
                    None if unfinished else finished_at,
                    len(log),
                    snapshot,
                )
            )
            rows.extend(log)
        conn.executemany(
            "INSERT INTO responses (id, created_at, model, request, output_text, item_id,"
            " input_tokens, output_tokens, completed_at) VALUES (?,?,?,?,?,?,?,?,?)",
            responses,
        )
        conn.executemany(
            "INSERT INTO tasks (id, model, state, on_restart, mode, created_at, started_at,"
            " finished_at, last_seq, snapshot) VALUES (?,?,?,?,'background',?,?,?,?,?)",
            tasks,
        )
        conn.executemany(
            "INSERT INTO task_events (task_id, seq, type, created_at, data) VALUES (?,?,?,?,?)",
            rows,
        )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    settle(data_dir)
    return events


def settle(data_dir: Path) -> None:
    """fsync every file of a fixture built without fsync: otherwise the service's first
    fsync of the database flushes the whole freshly written file (hundreds of MB), and the
    bench would time the fixture's write-back instead of the service."""
    for file in data_dir.rglob("*"):
        if file.is_file():
            fd = os.open(file, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _event_log(
    task_id: str, item_id: str | None, state: str, k: int, at: float
) -> list[tuple[str, int, str, float, str]]:
    """k gapless events whose types imply `state` (created, in_progress, item, deltas...)."""
    types = ["response.created"]
    if item_id is not None:
        types += [
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ]
        final = {"completed": ["response.completed"], "cancelling": ["response.cancelling"]}
        tail = final.get(state, [])
        types += ["response.output_text.delta"] * max(k - len(types) - len(tail), 0) + tail
    elif state == "loading":
        types.append("response.loading")
    out = []
    word = 0
    for seq, kind in enumerate(types, start=1):
        if kind == "response.output_text.delta":
            data = (
                f'{{"type":"{kind}","item_id":"{item_id}","output_index":0,'
                f'"content_index":0,"delta":" w{word}","sequence_number":{seq}}}'
            )
            word += 1
        else:
            data = (
                f'{{"type":"{kind}","response":{{"id":"{task_id}","object":"response",'
                f'"status":"in_progress","model":"bench-model","output":[]}},'
                f'"sequence_number":{seq}}}'
            )
        out.append((task_id, seq, kind, at, data))
    return out
