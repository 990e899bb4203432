"""B5 purge: retention over 1M events while a task keeps appending: total time, the longest
write-lock hold (each step of the writer thread timed, the core untouched), the worst
appender wait."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.report import Row
from bench.seed import Shape, seed, settle
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.storage import db as db_module
from lmsp_desktop.core.storage.db import DEFAULT_SYNCHRONOUS, Database
from lmsp_desktop.core.storage.retention import TERMINAL_SQL, purge_finished
from lmsp_desktop.core.storage.tasks import NewTask, TaskStore

APPEND_EVERY_S = 0.01


class TimedDatabase(Database):
    """Database whose writer thread's steps are timed: each group's transaction (BEGIN
    IMMEDIATE to COMMIT, SQLite's write lock; `_run_group` wrapped, the core untouched) and
    each checkpoint between them (the writes queued meanwhile wait for it as for the lock)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.holds: list[float] = []  # appended in the writer thread, read once it is idle

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        started = time.perf_counter()
        try:
            super()._checkpoint(conn)
        finally:
            self.holds.append(time.perf_counter() - started)

    @contextlib.contextmanager
    def groups_timed(self) -> Iterator[None]:
        original = db_module._run_group

        def timed(conn: sqlite3.Connection, works: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(conn, works, **kwargs)
            finally:
                self.holds.append(time.perf_counter() - started)

        db_module._run_group = timed
        try:
            yield
        finally:
            db_module._run_group = original


async def _purge_with_appender(data_dir: Path) -> dict[str, float]:
    db = TimedDatabase(database_path(data_dir))
    await db.open()
    with db.groups_timed():
        return await _purge_timed(db)


async def _purge_timed(db: TimedDatabase) -> dict[str, float]:
    tasks = TaskStore(db)
    request = parse_create({"model": "bench-model", "input": "go", "background": True}, "fail")
    task_id = (await tasks.create(NewTask(model="bench-model", request=request))).task_id
    await tasks.mark_running(task_id)
    appends: list[float] = []
    stop = asyncio.Event()

    async def appender() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            asked = time.perf_counter()
            await tasks.append_deltas(
                task_id, [f" t{n}"], output_tokens=n, input_tokens=3, snapshot={"tokens": [n]}
            )
            appends.append(time.perf_counter() - asked)
            await asyncio.sleep(APPEND_EVERY_S)

    running = asyncio.create_task(appender())
    await asyncio.sleep(0.2)
    db.holds.clear()
    started = time.perf_counter()
    purged = await purge_finished(db, 7.0)
    total = time.perf_counter() - started
    stop.set()
    await running
    left = await db.fetchone("SELECT COUNT(*) AS c FROM task_events")
    await db.close()
    return {
        "total": total,
        "purged": purged,
        "hold": max(db.holds) * 1000,
        "append": max(appends) * 1000,
        "appends": len(appends),
        "left": left["c"] if left else -1,
    }


def raw_purge(data_dir: Path, batch: int = 200) -> float:
    """The limit: the same tasks deleted with raw sqlite3, `batch` tasks per transaction,
    read from the same index, three set-based DELETEs each, at the same synchronous."""
    conn = sqlite3.connect(database_path(data_dir), isolation_level=None)
    conn.execute(f"PRAGMA synchronous={DEFAULT_SYNCHRONOUS}")
    cutoff = time.time() - 7 * 86400
    start = time.perf_counter()
    while True:
        conn.execute("BEGIN IMMEDIATE")
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM tasks INDEXED BY tasks_expiry WHERE state IN "
                f"({TERMINAL_SQL}) AND finished_at < ? ORDER BY finished_at LIMIT ?",
                (cutoff, batch),
            )
        ]
        if not ids:
            conn.execute("COMMIT")
            break
        marks = ",".join("?" * len(ids))
        conn.execute(f"DELETE FROM task_events WHERE task_id IN ({marks})", ids)
        conn.execute(f"DELETE FROM tasks WHERE id IN ({marks})", ids)
        conn.execute(f"DELETE FROM responses WHERE id IN ({marks})", ids)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def run(work: Path, quick: bool) -> list[Row]:
    tasks = 2000 if quick else 100_000
    shape = Shape(tasks=tasks, events_per_task=10, finished_age_days=30)
    events = seed(work / "b5-store", shape)
    shutil.copytree(work / "b5-store", work / "b5-raw")
    settle(work / "b5-raw")
    raw_s = raw_purge(work / "b5-raw")
    shutil.rmtree(work / "b5-raw")
    found = asyncio.run(_purge_with_appender(work / "b5-store"))
    if found["purged"] != tasks or found["left"] > found["appends"] + 10:
        raise AssertionError(f"purge left work behind: {found}")
    total = found["total"]
    return [
        Row("B5", f"raw purge, same {events:,} events, 200 tasks/txn", raw_s, "s"),
        Row(
            "B5",
            f"purge {events:,} events ({tasks:,} tasks), total",
            total,
            "s",
            "≥ 0.8× raw",
            raw_s / total,
            "raw speed",
            raw_s / total >= 0.8,
            note=f"{events / total:,.0f} events/s; appender committed {found['appends']} "
            "times meanwhile",
        ),
        Row(
            "B5",
            "longest write-lock hold during purge",
            found["hold"],
            "ms",
            "≤ 50 ms",
            None,
            "",
            found["hold"] <= 50,
        ),
        Row(
            "B5",
            f"worst append_deltas wait (one every {APPEND_EVERY_S * 1000:.0f} ms)",
            found["append"],
            "ms",
            "≤ 100 ms",
            None,
            "",
            found["append"] <= 100,
        ),
    ]
