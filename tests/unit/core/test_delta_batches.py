"""Text deltas of tasks generating at once are committed together (issue 26, B2): one unit of
work for all of them, yet each task's text, snapshot and gapless events are its own, and a
task cancelled meanwhile commits nothing more while the others go on (rule 11.2)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import pytest

from lmsp_desktop.core.states import EventType, TaskState
from lmsp_desktop.core.storage import db as db_module
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.transitions import append_events
from tests.support.store_helpers import check_invariants, deltas_of, drive, units_counted

TASKS = 12


async def append(store: Store, task_id: str, words: list[str], n: int) -> bool:
    return await store.tasks.append_deltas(
        task_id, words, output_tokens=n, input_tokens=3, snapshot={"tokens": list(range(n))}
    )


async def test_tasks_generating_at_once_share_one_unit_and_keep_their_own_text(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [await drive(store.tasks, TaskState.RUNNING) for _ in range(TASKS)]  # "Hel", "lo"
    cancelled = ids[3]
    await store.tasks.cancel(cancelled)  # running → cancelling: its deltas are refused
    units = units_counted(monkeypatch)
    for round_ in range(3):
        words = {t: [f" {t[-4:]}-{round_}-{k}" for k in range(round_ + 1)] for t in ids}
        done = await asyncio.gather(
            *(append(store, t, words[t], 2 + (round_ + 1) * (round_ + 2) // 2) for t in ids)
        )
        assert done == [t != cancelled for t in ids]
    assert units == [1, 1, 1]  # one unit of work per round, whatever the number of tasks

    for t in ids:
        row = await store.tasks.get(t)
        expected = ["Hel", "lo"]
        if t != cancelled:
            expected += [f" {t[-4:]}-{r}-{k}" for r in range(3) for k in range(r + 1)]
        assert deltas_of(store, t) == expected
        assert row["output_text"] == "".join(expected)
        if t != cancelled:
            assert json.loads(row["snapshot"]) == {"tokens": list(range(8))}
            assert row["output_tokens"] == 8
    check_invariants(store.db.path)  # gapless sequence numbers ending at last_seq


async def test_a_task_appending_twice_at_once_keeps_its_order(store: Store) -> None:
    task_id = await drive(store.tasks, TaskState.RUNNING)
    first = asyncio.create_task(append(store, task_id, [" a", " b"], 4))
    second = asyncio.create_task(append(store, task_id, [" c"], 5))
    assert await asyncio.gather(first, second) == [True, True]
    assert deltas_of(store, task_id) == ["Hel", "lo", " a", " b", " c"]
    assert (await store.tasks.get(task_id))["output_text"] == "Hello a b c"
    check_invariants(store.db.path)


async def test_appends_after_a_batch_failed_before_its_work_go_into_a_new_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, other = [await drive(store.tasks, TaskState.RUNNING) for _ in range(2)]
    original = db_module._run_group
    failures = [sqlite3.OperationalError("database is locked")]  # as another program would

    def run_group(conn: sqlite3.Connection, works: list[Any], **kw: Any) -> Any:
        if failures:
            raise failures.pop()  # the group fails before any of its work has run
        return original(conn, works, **kw)

    monkeypatch.setattr(db_module, "_run_group", run_group)
    with pytest.raises(Exception, match="locked"):
        await append(store, first, [" lost"], 3)
    # Another task's append is not left with the failed batch: it commits in a new one.
    assert await append(store, other, [" kept"], 3)
    assert deltas_of(store, first) == ["Hel", "lo"]
    assert deltas_of(store, other) == ["Hel", "lo", " kept"]
    check_invariants(store.db.path)


async def test_listeners_hear_deltas_and_a_cancel_in_the_order_they_were_committed(
    store: Store,
) -> None:
    """Deltas and a cancel of the same task in one group: the window and /metrics hear the
    deltas (running) first, then the cancel, never the task going back to running."""
    task_id = await drive(store.tasks, TaskState.RUNNING)
    heard: list[tuple[str, int]] = []
    store.tasks.listeners.append(lambda change: heard.append((change.state, change.last_seq)))
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    def busy(conn: sqlite3.Connection) -> None:  # holds the writer: the next units group
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result()

    blocker = asyncio.create_task(store.db.run(busy))
    await asyncio.sleep(0)
    appended = asyncio.create_task(append(store, task_id, [" a", " b"], 4))
    await asyncio.sleep(0)
    cancel = asyncio.create_task(store.tasks.cancel(task_id))
    await asyncio.sleep(0)
    release.set()
    await asyncio.gather(blocker, appended, cancel)
    assert appended.result() is True  # committed before the cancel
    assert [state for state, _ in heard] == [TaskState.RUNNING, TaskState.CANCELLING]
    assert heard[0][1] < heard[1][1]


async def test_a_batch_of_more_events_than_one_insert_takes_keeps_every_event(
    store: Store,
) -> None:
    """The events of a batch go in as multi-row INSERTs of at most 256 rows each (deltas.py):
    three tasks' 303 deltas (256 + 32 + 8 + 4 + 2 + 1 rows) are all in the log, each once,
    numbered gaplessly in their order, each task's text its own."""
    ids = [await drive(store.tasks, TaskState.RUNNING) for _ in range(3)]
    words = {t: [f" {t[-4:]}:{k}" for k in range(101)] for t in ids}
    done = await asyncio.gather(*(append(store, t, words[t], 2 + 101) for t in ids))
    assert done == [True, True, True]
    for t in ids:
        assert deltas_of(store, t) == ["Hel", "lo", *words[t]]
        assert (await store.tasks.get(t))["output_text"] == "Hello" + "".join(words[t])
    check_invariants(store.db.path)


async def test_deltas_foreseen_wrong_are_numbered_from_the_log(store: Store) -> None:
    """A task's next deltas are numbered on the loop from its previous append (deltas.py,
    Numbering). Should the log have grown another way meanwhile (here an event written by a
    unit of work of its own, which the store's numbering never hears of), the writer numbers
    them from the log: no number twice, no gap, the text in order."""
    task_id = await drive(store.tasks, TaskState.RUNNING)
    assert await append(store, task_id, [" a"], 3)
    assert await append(store, task_id, [" b"], 4)  # foreseen from the one before

    def another_event(conn: sqlite3.Connection) -> None:
        (last,) = conn.execute("SELECT last_seq FROM tasks WHERE id=?", (task_id,)).fetchone()
        append_events(conn, task_id, last, [{"type": EventType.RESUMED}])

    await store.db.run(another_event)
    assert await append(store, task_id, [" c"], 5)  # foreseen wrong: one number too low
    assert await append(store, task_id, [" d"], 6)  # and the next from what the writer found
    assert deltas_of(store, task_id) == ["Hel", "lo", " a", " b", " c", " d"]
    assert (await store.tasks.get(task_id))["output_text"] == "Hello a b c d"
    numbers = (
        sqlite3.connect(store.db.path)
        .execute(
            "SELECT seq, json_extract(data, '$.sequence_number') FROM task_events WHERE task_id=?"
            " ORDER BY seq",
            (task_id,),
        )
        .fetchall()
    )
    assert [seq for seq, _ in numbers] == list(range(1, len(numbers) + 1))
    assert all(seq == in_json for seq, in_json in numbers)  # each event says its own number
    check_invariants(store.db.path)


async def test_one_batch_of_tasks_foreseen_right_wrong_not_at_all_and_stopped(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer moves the tasks whose numbers the loop foresaw in one statement, and the
    ones it left (never foreseen, foreseen wrong) in another (deltas.py): each task of such a
    mixed batch is moved past its deltas once, its events numbered gaplessly from its own log,
    and a task no longer running — whether the numbering knew it or not — commits nothing."""
    right, wrong, stopped_known, stopped, fresh = [
        await drive(store.tasks, TaskState.RUNNING) for _ in range(5)
    ]
    for task_id in (right, wrong, stopped_known):
        assert await append(store, task_id, [" a"], 3)  # the next numbers foreseen from here

    def another_event(conn: sqlite3.Connection) -> None:
        (last,) = conn.execute("SELECT last_seq FROM tasks WHERE id=?", (wrong,)).fetchone()
        append_events(conn, wrong, last, [{"type": EventType.RESUMED}])

    await store.db.run(another_event)  # `wrong`'s log grows behind the numbering's back
    await store.tasks.cancel(stopped)
    with monkeypatch.context() as patched:  # a stop the numbering does not hear of
        patched.setattr(store.tasks._numbering, "forget", lambda task_id: None)
        await store.tasks.cancel(stopped_known)
    units = units_counted(monkeypatch)
    ids = [right, wrong, stopped_known, stopped, fresh]
    done = await asyncio.gather(*(append(store, t, [" b", " c"], 5) for t in ids))
    assert units == [1]  # one batch
    assert done == [True, True, False, False, True]

    assert deltas_of(store, right) == ["Hel", "lo", " a", " b", " c"]
    assert deltas_of(store, wrong) == ["Hel", "lo", " a", " b", " c"]
    assert deltas_of(store, fresh) == ["Hel", "lo", " b", " c"]
    assert deltas_of(store, stopped_known) == ["Hel", "lo", " a"]
    assert deltas_of(store, stopped) == ["Hel", "lo"]
    for task_id, text in [(right, "Hello a b c"), (wrong, "Hello a b c"), (fresh, "Hello b c")]:
        row = await store.tasks.get(task_id)
        assert row["output_text"] == text
        assert json.loads(row["snapshot"]) == {"tokens": list(range(5))}
    # And the batch after it is foreseen from what this one found, wrong or not.
    done = await asyncio.gather(*(append(store, t, [" d"], 6) for t in (right, wrong, fresh)))
    assert done == [True, True, True]
    assert units == [1, 1]
    for task_id in (right, wrong, fresh):
        assert deltas_of(store, task_id)[-3:] == [" b", " c", " d"]
    check_invariants(store.db.path)  # gapless numbers ending at last_seq, each once
