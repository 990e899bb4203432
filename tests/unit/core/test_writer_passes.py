"""The writer thread goes on from one group to the next by itself (Database._write_groups,
B2): a write queued behind another commits while the event loop is busy, instead of waiting
for a turn of the loop between the two (the loop's turn then overlaps the next transaction:
32 streams prepare their next tokens meanwhile)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import new_task

HANG = 10.0  # a bound on a hang, not a timing assertion


def committed_tasks(store: Store) -> int:
    conn = sqlite3.connect(store.db.path)  # another connection: only what is committed
    try:
        return int(conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
    finally:
        conn.close()


async def test_a_write_queued_behind_another_commits_while_the_loop_is_busy(
    store: Store,
) -> None:
    holding, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:  # a group of its own, held in the writer
        holding.set()
        release.wait(HANG)

    first = store.db.submit(hold)
    assert await asyncio.to_thread(holding.wait, HANG)
    create = asyncio.ensure_future(store.tasks.create(new_task()))
    await asyncio.sleep(0)  # the create's unit now waits behind the held group
    assert store.db.last_waiting() is not None
    release.set()
    # From here the loop takes no turn (it polls the file, blocking) until the create is
    # committed or the bound has passed: only the writer thread can commit it.
    deadline = time.monotonic() + HANG
    while committed_tasks(store) == 0 and time.monotonic() < deadline:
        time.sleep(0.005)  # noqa: ASYNC251 - the loop is to be blocked here
    assert committed_tasks(store) == 1
    await first
    assert (await create).task_id
