"""Recovery at startup (LMSP 11.3): every leftover task gets the outcome of its policy.

Runs before anything is served. Each task's new state and its event are written in one
transaction: at startup, one transaction for all leftovers and the report. A task already
handled by this startup is skipped, so running recovery twice changes nothing more.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from lmsp_desktop.core.states import (
    RECOVERY_TABLE,
    UNFINISHED,
    EventType,
    RestartPolicy,
    TaskKind,
    TaskState,
)
from lmsp_desktop.core.storage.events import Row, carrying_response, closing_with, to_json
from lmsp_desktop.core.storage.tasks import TaskStore
from lmsp_desktop.core.storage.transitions import Added, Transition, requeued, transition_many
from lmsp_desktop.core.views import (
    RESTART_ERROR_CODE,
    RecoveryItem,
    RecoveryReport,
    TaskChange,
)

log = logging.getLogger(__name__)
BATCH = 2000  # tasks per set-based statement
# The ceiling of recovery's page cache (_cache_for), not what it takes: SQLite allocates a
# page when it reads or changes one. A task of B4's seeded database changes 3.5 KiB (its
# row, its events, its response, their index entries) and reads 1.6; one that generated a
# long text carries it in up to five of its closing events (done text, part, item, and
# twice in the response).
CACHE_KIB_PER_TASK = 64
CACHE_KIB_MAX = 256 * 1024
ERROR_CODE = RESTART_ERROR_CODE
ERROR_MESSAGE = "The service restarted while this task was unfinished, and its policy is fail."


def _count_boot(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM service_config WHERE key='boot_count'").fetchone()
    boot = int(json.loads(row[0]) if row else 0) + 1
    conn.execute(
        "INSERT OR REPLACE INTO service_config (key, value) VALUES ('boot_count', ?)",
        (json.dumps(boot),),
    )
    return boot


async def next_boot(store: TaskStore) -> int:
    """Count this startup; recovery marks what it handled with this number."""
    return await store.db.run(_count_boot)


async def recover(
    store: TaskStore,
    boot: int | None = None,
    *,
    first: Callable[[sqlite3.Connection], object] | None = None,
) -> RecoveryReport:
    """Apply table 11.3 to every task left queued, loading, running or cancelling: one
    transaction (one commit) for all of them and the report, since nothing is served
    before it has finished. Each cell is a few set-based statements per slice of BATCH.
    `boot` None: this startup is counted in the same transaction; `first`: the startup's
    other writes, in it too (Core.open: all of a start's writes are one commit)."""
    started = time.time()
    states = sorted(map(str, UNFINISHED))

    def work(conn: sqlite3.Connection) -> tuple[RecoveryReport, list[TaskChange]]:
        if first is not None:
            first(conn)
        boot_now = _count_boot(conn) if boot is None else boot
        read = conn.cursor()
        read.row_factory = None
        # Read here under the write lock, in this transaction: _recover_batch need not
        # read them again.
        # With each download's snapshot: a failing move clears it, and the report says the
        # bytes it kept (read in this one pass over the rows, not again per batch).
        read_rows = read.execute(
            "SELECT id, state, on_restart, recovered_boot, CASE WHEN kind = ? THEN snapshot END"
            f" FROM tasks WHERE state IN ({','.join('?' for _ in states)})"
            " AND recovered_boot IS NOT ? ORDER BY n",
            (str(TaskKind.DOWNLOAD), *states, boot_now),
        ).fetchall()
        kept = {row[0]: _snapshot_bytes(row[4]) for row in read_rows if row[4] is not None}
        rows = [row[:4] for row in read_rows]
        done: list[tuple[RecoveryItem, TaskChange]] = []
        with _cache_for(conn, len(rows)):
            for at in range(0, len(rows), BATCH):  # bounds the SQL variables of a statement
                batch = rows[at : at + BATCH]
                done += _recover_batch(
                    conn,
                    ids=[row[0] for row in batch],
                    boot=boot_now,
                    now=started,
                    rows=batch,
                    bytes_kept=kept,
                )
            report = RecoveryReport(started, time.time(), [item for item, _change in done])
            if report.items:
                # orjson writes a dataclass as the dict of its fields in their order: the text
                # of as_json()'s items without making 10k dicts first (B4: 10-50 ms -> 3)
                conn.execute(
                    "INSERT INTO recovery_reports (started_at, finished_at, items) VALUES (?,?,?)",
                    (report.started_at, report.finished_at, to_json(report.items)),
                )
        return report, [change for _item, change in done]

    report, changes = await store.db.run(work)
    store.publish(changes)
    if report.items:
        _give_back_memory()
    return report


def _give_back_memory() -> None:
    """Hand the heap recovery used back to the system. Its page cache (_cache_for) and its
    rows are freed at the commit, but glibc keeps freed heap for the process unless told: the
    service stayed at 382 MB for its whole run after recovering 2,000 tasks of 16 KiB texts
    (234 MB with SQLite's usual cache), 36 MB once trimmed (the reviewer's measurement)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc (macOS, Windows, musl): their allocators return memory themselves


async def recover_after_crash(
    store: TaskStore,
    task_ids: list[str],
    code: str,
    message: str,
    first_tokens: Mapping[str, float] | None = None,
) -> list[RecoveryItem]:
    """A model's engine process died with these tasks unfinished: the same table 11.3 as a
    restart of the service, failing with `code` (engine_crashed) instead of server_restarted.
    Not marked with a boot: a task may live through several crashes in one run.
    `first_tokens`: the first output token times of the runs the crash cut (the runner's),
    stored for those the move ends."""
    done = await store.db.run(
        functools.partial(
            _recover_batch,
            ids=task_ids,
            boot=None,
            now=time.time(),
            error=(code, message),
            first_tokens=first_tokens or {},
        )
    )
    store.publish([change for _item, change in done])
    return [item for item, _change in done]


def _recover_batch(
    conn: sqlite3.Connection,
    *,
    ids: list[str],
    boot: int | None,
    now: float,
    error: tuple[str, str] = (ERROR_CODE, ERROR_MESSAGE),
    rows: list[tuple[str, str, str, int | None]] | None = None,
    first_tokens: Mapping[str, float] | None = None,
    bytes_kept: Mapping[str, int] | None = None,
) -> list[tuple[RecoveryItem, TaskChange]]:
    """In the writer thread, under the write lock: the tasks re-read (unless `rows` has
    them, read under this lock: id, state, policy, recovered_boot), then moved by their
    (state, policy) cell of table 11.3, one set-based transition per cell. `boot` marks the
    tasks as handled by this startup (None: after an engine crash, unmarked)."""
    if rows is None:
        marks = ",".join("?" for _ in ids)
        read = conn.cursor()
        read.row_factory = None  # plain tuples; the states compared as text, enums once per cell
        rows = read.execute(
            f"SELECT id, state, on_restart, recovered_boot FROM tasks WHERE id IN ({marks})"
            " ORDER BY n",
            ids,
        ).fetchall()
    cells: dict[tuple[str, str], list[str]] = {}
    order: dict[str, int] = {}
    for at, (task_id, state, on_restart, recovered_boot) in enumerate(rows):
        order[task_id] = at
        if state not in UNFINISHED or (boot is not None and recovered_boot == boot):
            continue  # handled meanwhile (another recovery, or the task moved on)
        cells.setdefault((state, on_restart), []).append(task_id)
    done = []
    for (state, on_restart), task_ids in cells.items():
        before, policy = TaskState(state), RestartPolicy(on_restart)
        after = RECOVERY_TABLE[(before, policy)]
        event_type, move = _cell_move(task_ids, before, after, boot, now, error, first_tokens)
        event = str(event_type)
        changed = transition_many(conn, move)
        for new in changed:
            item = RecoveryItem(
                new["id"],
                new["model"],
                str(before),
                str(policy),
                str(after),
                event,
                new["last_seq"],
                _tokens_kept(new) if after == TaskState.RUNNING else None,
                _bytes_kept(new, bytes_kept) if new["kind"] == TaskKind.DOWNLOAD else None,
            )
            change = TaskChange(
                new["id"], after, new["last_seq"], new["model"], (event,), kind=new["kind"]
            )
            done.append((item, change))
    done.sort(key=lambda pair: order[pair[0].task_id])
    return done


@contextlib.contextmanager
def _cache_for(conn: sqlite3.Connection, tasks: int) -> Iterator[None]:
    """The writer's page cache large enough, while recovery runs, to hold every page it
    changes until its commit. With SQLite's default (2 MB) changed pages spill into the WAL
    during the transaction, and those changed again after their spill are written twice
    (B4, 10k tasks: 48 MB written for a 35 MB WAL). The cache grows only as far as it is
    used. Its usual size is back before the commit: SQLite never drops a changed page
    from the cache, and frees the pages over that size as the commit makes them clean."""
    usual = conn.execute("PRAGMA cache_size").fetchone()[0]  # negative: KiB (the default)
    wanted = min(tasks * CACHE_KIB_PER_TASK, CACHE_KIB_MAX)
    if -usual >= wanted:
        yield
        return
    conn.execute(f"PRAGMA cache_size={-wanted}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA cache_size={usual}")


def _tokens_kept(row: Row) -> int:
    """The generated tokens a resumed task continues after: those of its last snapshot
    (none when it was killed before its first snapshot)."""
    snapshot = json.loads(row["snapshot"]) if row["snapshot"] else {}
    return len(snapshot.get("tokens", []))


def _bytes_kept(row: Row, before: Mapping[str, int] | None) -> int:
    """The bytes a download's last progress said were on disk: its snapshot, or when its move
    cleared the snapshot (a failure) what `before` read of it. The file may hold a little
    more, written after that event."""
    if before is not None and row["id"] in before:
        return before[row["id"]]
    return _snapshot_bytes(row["snapshot"])


def _snapshot_bytes(snapshot: str | None) -> int:
    return int(json.loads(snapshot).get("bytes_done") or 0) if snapshot else 0


def _cell_move(
    task_ids: list[str],
    before: TaskState,
    after: TaskState,
    boot: int | None,
    now: float,
    error: tuple[str, str],
    first_tokens: Mapping[str, float] | None = None,
) -> tuple[str, Transition]:
    """One cell of table 11.3 as one move of many tasks, and the event it writes."""
    ids, frm = tuple(task_ids), (before,)
    marks: dict[str, Any] = {} if boot is None else {"recovered_boot": boot}
    if after in (TaskState.FAILED, TaskState.CANCELLED):  # ended, its open items closed
        failed = after == TaskState.FAILED
        event = EventType.FAILED if failed else EventType.CANCELLED
        code, message = error
        return event, Transition(
            ids,
            frm,
            after,
            closing_with(event),
            {**marks, "finished_at": now, "snapshot": None},
            {"error": json.dumps({"code": code, "message": message})} if failed else {},
            {i: first_tokens[i] for i in ids if i in first_tokens} if first_tokens else {},
        )
    if after == TaskState.QUEUED:
        return EventType.QUEUED, requeued(ids, before, **marks)
    # running, resumed from its snapshot by the runner. Its run starts now, as a retried
    # task's does when it runs again: started_at kept from before the restart made its
    # duration (finished_at - started_at, the window's Duration) count the downtime.
    return EventType.RESUMED, Transition(
        ids,
        frm,
        after,
        carrying_response(EventType.RESUMED),
        {**marks, "restarts": Added(1), "started_at": now},
    )


async def last_report(store: TaskStore) -> dict[str, Any] | None:
    row = await store.db.fetchone(
        "SELECT started_at, finished_at, items FROM recovery_reports ORDER BY n DESC LIMIT 1"
    )
    if row is None:
        return None
    return {
        "started_at": int(row["started_at"]),
        "finished_at": int(row["finished_at"]),
        "items": json.loads(row["items"]),
    }
