"""B2 events: delta events persisted per second across 32 concurrently generating tasks
through TaskStore.append_deltas (state check, events, last_seq, text and snapshot in one
transaction: rule 11.2) as the runner calls it (answered once the state check has run, while
the commit syncs; the finish once committed, and the run's time ends after it), against raw
batched executemany of the same rows, in rounds (`run`): the verdict is the median of the
rounds' ratios."""

from __future__ import annotations

import asyncio
import json
import resource
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any, cast

from bench.report import Row
from bench.seed import open_raw
from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.runner import SnapshotTokens
from lmsp_desktop.core.states import EventType
from lmsp_desktop.core.storage.creates import created_row
from lmsp_desktop.core.storage.db import DEFAULT_SYNCHRONOUS
from lmsp_desktop.core.storage.events import (
    closing_with,
    in_progress,
    message_opened,
    numbered,
    numbered_deltas,
    with_response,
)
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask, TaskStore, finishing
from lmsp_desktop.core.storage.transitions import INSERT_EVENT

TASKS = 32
PER_CALL = 8  # deltas per append_deltas call: one pump batch
TOKENS_PER_TASK = 256  # then the task completes and a new one starts in its place
MODEL = "bench-model"
ROUNDS, ROUND_SECONDS = 6, 2.0  # each side's time per round (24 s in all; each first 3 times)


def cpu_seconds() -> float:
    """This process's CPU time so far, every thread's (the store's writer thread included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _store_rate(data_dir: Path, seconds: float) -> tuple[float, float, str]:
    store = Store(data_dir)
    await store.open()
    tasks: TaskStore = store.tasks
    request = parse_create({"model": MODEL, "input": "Tell a story.", "background": True}, "fail")
    events = 0
    deadline = time.perf_counter() + seconds

    async def generate() -> None:
        nonlocal events
        while time.perf_counter() < deadline:
            created = await tasks.create(NewTask(model=MODEL, request=request))
            task_id = created.task_id
            await tasks.mark_running(task_id)
            tokens: list[int] = []
            # The snapshot as the runner hands it over: its JSON, the token list encoded as
            # the tokens come (a dict would be serialised whole at every call, which the
            # service never does).
            snapshot = SnapshotTokens(tokens)
            finished = False
            while not finished and time.perf_counter() < deadline:
                tokens.extend(range(len(tokens), len(tokens) + PER_CALL))
                # The last hand-over carries the finish, as the runner's (Runner._generate):
                # committed with the last deltas and their snapshot, which the finish clears.
                finished = len(tokens) >= TOKENS_PER_TASK
                ok = await tasks.append_deltas(
                    task_id,
                    [f" w{t}" for t in tokens[-PER_CALL:]],
                    output_tokens=len(tokens),
                    input_tokens=12,
                    snapshot=snapshot.snapshot({"seed": 7}),
                    finish=finishing(
                        task_id, incomplete_reason=None, input_tokens=12, output_tokens=len(tokens)
                    )
                    if finished
                    else None,
                    early=True,  # as the runner hands over: answered while the commit syncs
                )
                assert ok
                events += PER_CALL
            if not finished:  # the deadline came first
                await tasks.finish(
                    task_id, incomplete_reason=None, input_tokens=12, output_tokens=len(tokens)
                )

    start, cpu = time.perf_counter(), cpu_seconds()
    await asyncio.gather(*(generate() for _ in range(TASKS)))
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    await store.close()
    return events / elapsed, cpu / events, check_rule_11_2(database_path(data_dir))


def check_rule_11_2(path: Path) -> str:
    """Gapless sequence numbers ending at last_seq, and the text equal to the deltas."""
    conn = sqlite3.connect(path)
    bad = conn.execute(
        "SELECT COUNT(*) FROM tasks t WHERE last_seq != (SELECT COUNT(*) FROM task_events e "
        "WHERE e.task_id=t.id) OR last_seq != (SELECT MAX(seq) FROM task_events e "
        "WHERE e.task_id=t.id)"
    ).fetchone()[0]
    texts = conn.execute(
        "SELECT r.output_text, (SELECT group_concat(json_extract(data,'$.delta'),'') FROM "
        "(SELECT data FROM task_events e WHERE e.task_id=r.id AND "
        "type='response.output_text.delta' ORDER BY seq)) FROM responses r"
    ).fetchall()
    conn.close()
    wrong_text = sum(1 for stored, joined in texts if stored != (joined or ""))
    if bad or wrong_text:
        raise AssertionError(f"rule 11.2 broken: {bad} gappy logs, {wrong_text} wrong texts")
    return "rule 11.2 checked after the run: logs gapless, last_seq and text match"


def raw_rate(data_dir: Path, seconds: float) -> tuple[float, float]:
    """The limit: per round, one transaction with executemany of all 32 tasks' events and
    updates (snapshot+last_seq, text), raw sqlite3 at the same synchronous.

    The same rows as the store's: each task's log starts with the events of its creation and
    start (response.created, response.in_progress, the message item and its part opened)
    and ends with those of its completion (text, part and item done, response.completed),
    the task and its response marked completed; their payloads come from the store's own
    builders (events.py, the deltas' numbered_deltas, the snapshot's SnapshotTokens) and the
    ids from its own new_id (the store's are 41 characters: a raw loop with 15-character ids
    wrote ~1 KB less per task and round and spent ~1 µs less CPU per event), so both sides
    write the same bytes. In the fewest transactions a raw loop needs: a generation's tasks
    created and started in one, each task's completion in the transaction of its last
    deltas (the store commits each move on its own)."""
    conn = open_raw(data_dir)
    conn.execute(f"PRAGMA synchronous={DEFAULT_SYNCHRONOUS}")
    request = parse_create({"model": MODEL, "input": "x", "background": True}, "fail")
    request_json = json.dumps(request)
    events = 0
    start, cpu = time.perf_counter(), cpu_seconds()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        ids = [new_id("resp") for _ in range(TASKS)]
        items = {t: new_id("msg") for t in ids}
        now = time.time()
        # Each task's joined row as the store's create gives it (creates.created_row).
        rows = {
            t: created_row(NewTask(model=MODEL, request=request, id=t), int(now), request_json)
            for t in ids
        }
        opening: list[tuple[Any, ...]] = []
        for t, row in rows.items():
            created = with_response(EventType.CREATED, build_response(row, 1, request))
            opening.append(numbered(t, 1, created, now))
            row.update(state="running", started_at=now, item_id=items[t], last_seq=4)
            for seq, event in enumerate([in_progress(row), *message_opened(items[t])], 2):
                opening.append(numbered(t, seq, event, now))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO responses (id, created_at, model, request, item_id) VALUES (?,?,?,?,?)",
            [(t, int(now), MODEL, request_json, items[t]) for t in ids],
        )
        conn.executemany(
            "INSERT INTO tasks (id, model, state, on_restart, mode, created_at, started_at,"
            " last_seq) VALUES (?, ?, 'running', 'fail', 'background', ?, ?, 4)",
            [(t, MODEL, int(now), now) for t in ids],
        )
        conn.executemany(INSERT_EVENT, opening)
        conn.execute("COMMIT")
        tokens: list[int] = []  # every task's (the same tokens), each with its snapshot
        snapshots = {t: SnapshotTokens(tokens) for t in ids}
        while len(tokens) < TOKENS_PER_TASK and time.perf_counter() < deadline:
            first = len(tokens)
            tokens.extend(range(first, first + PER_CALL))
            event_rows, task_rows, text_rows = [], [], []
            now = time.time()
            for t in ids:  # each task's work of its own, as the store's appenders do
                deltas = [f" w{x}" for x in tokens[first:]]
                event_rows += numbered_deltas(t, items[t], deltas, 4 + first + 1, now)
                task_rows.append((snapshots[t].snapshot({"seed": 7}), 4 + len(tokens), t))
                text_rows.append(("".join(deltas), len(tokens), t))
            events += len(event_rows)
            finished = len(tokens) >= TOKENS_PER_TASK
            if finished:  # the completion, in the transaction of the last deltas
                now = time.time()
                text = "".join(f" w{x}" for x in tokens)
                for t, row in rows.items():
                    row.update(
                        state="completed",
                        finished_at=now,
                        completed_at=int(now),
                        output_text=text,
                        input_tokens=12,
                        output_tokens=len(tokens),
                    )
                    seq = 4 + len(tokens)
                    for event in closing_with(EventType.COMPLETED)(cast("sqlite3.Row", row)):
                        seq += 1
                        event_rows.append(numbered(t, seq, event, now))
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(INSERT_EVENT, event_rows)
            conn.executemany("UPDATE tasks SET snapshot=?, last_seq=? WHERE id=?", task_rows)
            conn.executemany(
                "UPDATE responses SET output_text = output_text || ?, output_tokens=? WHERE id=?",
                text_rows,
            )
            if finished:
                conn.executemany(
                    "UPDATE tasks SET state='completed', finished_at=?, snapshot=NULL,"
                    " last_seq=last_seq+4 WHERE id=?",
                    [(now, t) for t in ids],
                )
                conn.executemany(
                    "UPDATE responses SET completed_at=?, input_tokens=12 WHERE id=?",
                    [(int(now), t) for t in ids],
                )
            conn.execute("COMMIT")
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    conn.close()
    return events / elapsed, cpu / events


def run(work: Path, quick: bool) -> list[Row]:
    """In rounds, each running both on fresh databases, the order turning round by round:
    the disk's fsync time drifts by 2x over seconds on these machines, and one long run of
    each, one after the other, measured the drift as much as the store (the same commit
    0.67-0.95x in three runs). The verdict is the median of the rounds' ratios; the rows'
    rates are the medians of the rounds'."""
    rounds, seconds = (1, 0.5) if quick else (ROUNDS, ROUND_SECONDS)
    raws: list[tuple[float, float]] = []
    stores: list[tuple[float, float]] = []
    checked = ""
    for n in range(rounds):
        for side in ("raw", "store") if n % 2 == 0 else ("store", "raw"):
            if side == "raw":
                raws.append(raw_rate(work / f"b2-raw-{n}", seconds))
                check_rule_11_2(database_path(work / f"b2-raw-{n}"))  # the peer's logs are whole
            else:
                rate, cpu, checked = asyncio.run(_store_rate(work / f"b2-store-{n}", seconds))
                stores.append((rate, cpu))
    ratios = [store[0] / raw[0] for store, raw in zip(stores, raws, strict=True)]
    ratio = statistics.median(ratios)
    raw, raw_cpu = (statistics.median(x) for x in zip(*raws, strict=True))
    rate, cpu = (statistics.median(x) for x in zip(*stores, strict=True))
    spread = f"{rounds} rounds of {seconds:g} s each, ratios {min(ratios):.2f}-{max(ratios):.2f}×"
    # The CPU per event beside the rates: on a shared machine the rates swing with the other
    # processes and the disk, the CPU each side spends per event much less.
    return [
        Row(
            "B2",
            f"raw executemany, {TASKS} tasks per txn",
            raw,
            "events/s",
            note=f"{TASKS} tasks × {PER_CALL} deltas per round in one transaction, raw sqlite3;"
            f" CPU {raw_cpu * 1e6:.1f} µs/event; median of {spread}",
        ),
        Row(
            "B2",
            f"append_deltas, {TASKS} tasks × {PER_CALL} deltas/call",
            rate,
            "events/s",
            "≥ 0.9× raw",
            ratio,
            "raw",
            ratio >= 0.9,
            note=f"{checked}; CPU {cpu * 1e6:.1f} µs/event (raw: {raw_cpu * 1e6:.1f}); {spread}",
        ),
    ]
