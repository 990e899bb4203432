"""A writer pass outlives the task that started it (the loop shutting down cancels every
task): the units it leaves fail once it has ended, and no second pass starts meanwhile, so a
unit never runs while a group that failed before it is still unsettled (what a delta batch's
check of its task's previous batch relies on, deltas.py). Found by review (rev13)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

from lmsp_desktop.core.storage.store import Store

HANG = 10.0  # a bound on a hang, not a timing assertion


async def test_a_cancelled_pass_lets_no_unit_run_before_a_failure_is_settled(
    store: Store,
) -> None:
    db = store.db
    holding, release = threading.Event(), threading.Event()
    seen: list[bool] = []  # what the later unit saw of the failed one, if it ran

    def hold(conn: sqlite3.Connection) -> None:
        holding.set()
        release.wait(HANG)

    def fail_group(conn: sqlite3.Connection) -> None:
        conn.execute("ROLLBACK")  # as SQLite does on a full disk: the group fails
        raise sqlite3.OperationalError("database or disk is full")

    first = db.submit(hold)
    assert await asyncio.to_thread(holding.wait, HANG)
    assert db._passes is not None
    db._passes.cancel()  # as asyncio.run's shutdown does
    await asyncio.sleep(0)
    failing = db.submit(fail_group, large=True)  # a group of its own
    later = db.submit(lambda conn: seen.append(failing.done()), large=True)
    for _ in range(3):
        await asyncio.sleep(0)  # any second pass would now be queued in the writer thread
    release.set()
    time.sleep(0.5)  # noqa: ASYNC251 - the loop takes no turn: it cannot settle `failing`
    outcomes = await asyncio.gather(first, failing, later, return_exceptions=True)
    assert False not in seen, "the later unit ran before the failure was settled"
    assert isinstance(outcomes[1], Exception)  # the failed group's own error
    assert seen == [True] or isinstance(outcomes[2], BaseException)
