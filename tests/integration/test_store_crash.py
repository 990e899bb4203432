"""SIGKILL a real writer process at random moments; nothing acknowledged may be lost.

After every kill the file must hold every acknowledged task with its acknowledged state in
its log, gapless sequences, each state matching its last event, and pass integrity_check.
At the end, recovery must give every leftover the outcome table 11.3 prescribes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.states import RECOVERY_TABLE, STATE_OF_EVENT, UNFINISHED, TaskState
from lmsp_desktop.core.storage.recovery import next_boot, recover
from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import ITEM_EVENT_PREFIXES, check_invariants, dump

ROOT = Path(__file__).resolve().parents[2]
# Half the kills land after a random number (0-40) of acknowledged writes, half at a random
# moment of the writer's start (imports, opening, recovery of the last one's leftovers);
# each costs a Python start. 12 reach every kind of moment (it was 32).
KILLS = 12
EVENT_OF_OUTCOME = {
    TaskState.FAILED: "response.failed",
    TaskState.QUEUED: "response.queued",
    TaskState.RUNNING: "response.resumed",
    TaskState.CANCELLED: "response.cancelled",
}


class Writer:
    """The writer subprocess, with its stdout lines collected by a thread."""

    def __init__(self, data_dir: Path, seed: int, stderr_path: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.stderr = stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.crash_writer", str(data_dir), str(seed)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.endswith(b"\n"):  # a line cut by the kill was never acknowledged
                self.lines.append(raw.decode().strip())

    def acks(self) -> int:
        return sum(1 for line in self.lines if line.startswith("ack "))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        self.stderr.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def check_acknowledged(db_path: Path, acked: dict[str, tuple[str, int]]) -> None:
    conn = sqlite3.connect(db_path)
    try:
        for task_id, (state, seq) in acked.items():
            row = conn.execute("SELECT last_seq FROM tasks WHERE id=?", (task_id,)).fetchone()
            assert row is not None, f"acknowledged task {task_id} was lost"
            assert row[0] >= seq, f"{task_id}: acknowledged event {seq} was lost"
            types = [
                t
                for (t,) in conn.execute(
                    "SELECT type FROM task_events WHERE task_id=? AND seq<=? ORDER BY seq",
                    (task_id, seq),
                )
                if not t.startswith(ITEM_EVENT_PREFIXES)
            ]
            assert STATE_OF_EVENT[types[-1]] == state, (
                f"{task_id}: acknowledged {state} at {seq}, the log says {types[-1]}"
            )
        (check,) = conn.execute("PRAGMA integrity_check").fetchone()
        assert check == "ok", check
    finally:
        conn.close()


def check_reports(db_path: Path) -> int:
    """Every recovery a writer committed before dying followed table 11.3."""
    conn = sqlite3.connect(db_path)
    try:
        n = 0
        for (items,) in conn.execute("SELECT items FROM recovery_reports"):
            for item in json.loads(items):
                key = (TaskState(item["state_before"]), item["on_restart"])
                assert item["state_after"] == RECOVERY_TABLE[key], item  # type: ignore[index]
                n += 1
        return n
    finally:
        conn.close()


def kill_writers_repeatedly(
    tmp_path: Path, data_dir: Path, rng: random.Random
) -> tuple[dict[str, tuple[str, int]], int]:
    """Start and SIGKILL the writer KILLS times, checking the file after every kill."""
    db_path = database_path(data_dir)
    acked: dict[str, tuple[str, int]] = {}
    total_acks = 0
    for n in range(KILLS):
        writer = Writer(data_dir, rng.randrange(1 << 30), tmp_path / f"writer{n}.err")
        deadline = time.monotonic() + 30
        if n % 2:  # at a random moment after start: in imports, opening, recovery or work
            time.sleep(rng.uniform(0.0, 0.5))
        else:  # after a random amount of acknowledged work
            want = rng.randint(0, 40)
            while writer.acks() < want and writer.proc.poll() is None:
                assert time.monotonic() < deadline, "the writer made no progress"
                time.sleep(0.002)
        exited = writer.proc.poll()
        writer.kill()
        err = (tmp_path / f"writer{n}.err").read_text()
        assert exited is None, f"the writer died on its own (exit {exited}):\n{err}"
        for line in writer.lines:
            if line.startswith("ack "):
                _, task_id, state, seq = line.split()
                acked[task_id] = (state, int(seq))
                total_acks += 1
        if db_path.exists() and acked:
            check_acknowledged(db_path, acked)
            check_invariants(db_path)
    return acked, total_acks


async def test_sigkill_at_random_moments_loses_nothing_acknowledged(tmp_path: Path) -> None:
    seed = int(os.environ.get("LMSP_CRASH_SEED", random.randrange(1 << 30)))
    print(f"crash test seed {seed} (set LMSP_CRASH_SEED to replay)")
    data_dir = tmp_path / "data"
    db_path = database_path(data_dir)
    acked, total_acks = kill_writers_repeatedly(tmp_path, data_dir, random.Random(seed))
    assert total_acks >= KILLS, "too few acknowledged writes to prove anything"

    # The final startup: every leftover gets its table 11.3 outcome.
    store = Store(data_dir)
    await store.open()
    try:
        leftovers = {
            r["id"]: (TaskState(r["state"]), r["on_restart"])
            for r in await store.tasks.unfinished(sorted(UNFINISHED))
        }
        print(
            f"{total_acks} acks, {check_reports(db_path)} recovered at writer starts, "
            f"{len(leftovers)} left for the last startup"
        )
        boot = await next_boot(store.tasks)
        report = await recover(store.tasks, boot)
        assert {i.task_id for i in report.items} == set(leftovers)
        for task_id, (before, policy) in leftovers.items():
            row = await store.tasks.get(task_id)
            expected = RECOVERY_TABLE[(before, policy)]
            assert row["state"] == expected, (task_id, before, policy)
            last = (await store.tasks.event_rows(task_id, after=row["last_seq"] - 1))[0]
            assert last["type"] == EVENT_OF_OUTCOME[expected]
            if expected == TaskState.FAILED:
                assert json.loads(row["error"])["code"] == "server_restarted"
        after = dump(db_path)
        assert (await recover(store.tasks, boot)).items == []
        assert dump(db_path) == after
        check_acknowledged(db_path, acked)
        check_invariants(db_path)
    finally:
        await store.close()
