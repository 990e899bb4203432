"""A full disk under a running task is said once in the log, not every few seconds. The
runner cannot record the task's failure while the disk is full and retries; each retry
logged "could not record the failure of … retrying later" again, so a user's log (the
serve window, the log file once there is room) filled with that one line. Now: a warning
when it begins, quiet retries (debug), and one line once the database takes writes again.
A real Core (real SQLite, real HTTP) with the FakeEngine; the full disk is injected into the
store's writer (`disk_full`), then freed."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import aiohttp
import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.db import Database
from tests.integration.test_faults import limit_pages, wait_terminal
from tests.support.fake_core import MODEL, running_core, session, token
from tests.support.polling import until

RUNNER = "lmsp_desktop.core.runner"


async def disk_full(db: Database, full: bool) -> None:
    """Test hook: SQLite's own full disk (SQLITE_FULL) for every write that adds a task event
    (a running task's output, its failure), until `full` is False. The database is capped at
    its size (test_faults.limit_pages) and each event insert also writes 64 KiB elsewhere (a
    TEMP trigger on the writer connection), so it needs pages the cap refuses: a cap alone
    still took the failure's few bytes in its pages' free room, where on a full disk every
    commit fails (the WAL cannot grow)."""
    conn = db._writer
    assert conn is not None

    def grow(writer: sqlite3.Connection) -> None:  # one step of the writer thread's own
        writer.execute("CREATE TABLE IF NOT EXISTS main.test_ballast (b BLOB)")
        writer.execute(
            "CREATE TEMP TRIGGER IF NOT EXISTS test_ballast BEFORE INSERT ON main.task_events "
            "BEGIN INSERT INTO test_ballast VALUES (zeroblob(65536)); END"
        )

    def stop(writer: sqlite3.Connection) -> None:
        writer.execute("DROP TRIGGER IF EXISTS temp.test_ballast")

    if full:
        await conn._execute(grow, conn._conn)
        await limit_pages(db, 0)
    else:
        await limit_pages(db, None)
        await conn._execute(stop, conn._conn)


async def test_a_full_disk_is_logged_once_and_its_end_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=RUNNER)
    engine = FakeEngine(tokens=["x" * 3000] * 40)
    engine.gate = threading.Semaphore(0)
    async with (
        running_core(tmp_path / "data", engine) as core,
        session(core, await token(core)) as http,
    ):
        body = {"model": MODEL, "input": "a", "background": True}
        async with http.post("/v1/responses", json=body) as r:
            task_id = (await r.json())["id"]

        async def running() -> bool:
            return await state_of(http, task_id) == "running"

        await until(running, what="the task running")
        await disk_full(core.store.db, True)
        engine.gate.release(100_000)  # its output now hits it

        def refusals() -> list[logging.LogRecord]:
            return [
                r
                for r in caplog.records
                if r.name == RUNNER and "record the failure of " + task_id in r.getMessage()
            ]

        # Retried several times while the disk stays full.
        await until(lambda: len(refusals()) >= 4, limit=120, what="retries while full")
        await disk_full(core.store.db, False)  # space is back
        task = await wait_terminal(http, task_id, within=60)
        assert task["state"] in ("completed", "failed"), task

    # What a user reads (serve logs INFO and above): the refusal once, with its reason and
    # what happens next, then its end once; the retries only at debug.
    said = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == RUNNER and r.levelno >= logging.INFO and task_id in r.getMessage()
    ]
    assert len(said) == 2, said
    (level, first), (end_level, end) = said
    assert level == "WARNING" and first.startswith(f"could not record the failure of {task_id}")
    assert "is full" in first and "Free some space" in first, first
    assert end_level == "INFO" and end.startswith("the database takes writes again"), end
    assert task_id in end, end
    retries = [r for r in refusals() if r.levelno == logging.DEBUG]
    assert len(retries) >= 3, retries


async def state_of(http: aiohttp.ClientSession, task_id: str) -> str:
    async with http.get(f"/v1/tasks/{task_id}") as r:
        return str((await r.json())["state"])
