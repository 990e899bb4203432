"""A start that cannot listen changes nothing (a reviewer's walk with a real `serve`): three
background tasks (on_restart fail, retry, resume) left running by a kill -9, then a `serve`
on a port another program holds. That start ran crash recovery, wrote its events and report,
hashed the models, and only then said the port was in use; the next real start blamed the
user for the crash ("after you quit with 2 tasks unfinished"), its report lacked the failed
task, and the two others showed `restarts 2` with a second `response.queued`/`resumed` for
one crash. Now the port is bound before anything writes: the blocked start leaves the
database as it was, and the next start recovers the crash once.

Real parts throughout: `serve` processes, the demo model through llama.cpp, a SIGKILL, a
socket of this test holding the port, the SQLite file compared row by row."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from lmsp_desktop.core.models.sources import SOURCES
from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.resume import SERVE_FLAGS, finished, wait_task

# A bound on a hang: three `serve` starts and a model load on a shared, loaded machine.
pytestmark = pytest.mark.timeout(600)

MODEL = "smollm2-135m-instruct"
PROMPT = "Write a short story about a lighthouse keeper and a storm."
POLICIES = ("fail", "retry", "resume")
COMMAND = (sys.executable, "-m", "lmsp_desktop")
# Only the demo model: the machine's LM Studio, Ollama and Hugging Face stores stay out.
FLAGS = (*SERVE_FLAGS, *(arg for source in SOURCES for arg in ("--no-source", source)))


def dump(data_dir: Path) -> list[str]:
    """Everything in the database, as SQL (the tasks, their events, the recovery reports,
    the service's config): what a start changed shows as a difference."""
    conn = sqlite3.connect(f"{(data_dir / 'lmsp.db').as_uri()}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def last_seqs(data_dir: Path, task_ids: Iterable[str]) -> dict[str, int]:
    conn = sqlite3.connect(f"{(data_dir / 'lmsp.db').as_uri()}?mode=ro", uri=True)
    try:
        return {
            task_id: conn.execute("SELECT last_seq FROM tasks WHERE id=?", (task_id,)).fetchone()[0]
            for task_id in task_ids
        }
    finally:
        conn.close()


def serve_on(data_dir: Path, port: int, cache: Path) -> subprocess.CompletedProcess[str]:
    """`lmsp-desktop serve --data-dir D --port PORT`, run to its end."""
    return subprocess.run(
        [*COMMAND, "--data-dir", str(data_dir), "serve", "--port", str(port), *FLAGS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "LMSP_CACHE_DIR": str(cache)},
    )


def test_a_start_on_a_port_in_use_changes_nothing_and_the_next_recovers_the_crash_once(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = ServeProcess(data, *FLAGS)
    url = server.start()
    token = create_token(data)
    ids: dict[str, str] = {}
    for policy in POLICIES:
        body = {"model": MODEL, "input": PROMPT, "max_output_tokens": 400}
        status, created = call(
            f"{url}/v1/responses", token, "POST", {**body, "background": True, "on_restart": policy}
        )
        assert status == 202, created
        ids[policy] = created["id"]
    # Killed while they run: each has made a few tokens (parallel 4: all three decode).
    for task_id in ids.values():
        task = wait_task(url, token, task_id, lambda t: t["output_tokens"] >= 3 or finished(t))
        assert not finished(task), f"{task_id} ended before the kill: {task}"
    server.kill()
    announced = (data / "service.json").read_text()
    before = dump(data)
    crashed_at = last_seqs(data, ids.values())

    # Another program holds the port: the start says so and exits 1, and changes nothing.
    cache = tmp_path / "blocked-cache"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        blocked = serve_on(data, port, cache)
    assert blocked.returncode == 1, blocked.stderr[-3000:]
    said = f"Port {port} on 127.0.0.1 is in use by another program"
    assert said in blocked.stderr, blocked.stderr[-3000:]
    after = dump(data)
    assert after == before, "\n".join(
        [f"- {row}" for row in before if row not in after]
        + [f"+ {row}" for row in after if row not in before]
    )[:4000]
    assert not (cache / "model-digests.json").exists(), "the blocked start hashed the models"
    assert "recovery" not in blocked.stderr, blocked.stderr[-3000:]
    assert "listening on" not in blocked.stdout
    # The killed run's service.json is left as it was (a start that never listened does
    # not announce itself).
    assert (data / "service.json").read_text() == announced

    # The port free again: this start recovers the crash, once, and says it was one.
    url = server.start()
    try:
        status, report = call(f"{url}/v1/recovery/last", token)
        assert status == 200, report
        items = {item["task_id"]: item for item in report["items"]}
        assert set(items) == set(ids.values()), report
        assert items[ids["fail"]]["state_after"] == "failed"
        assert items[ids["retry"]]["state_after"] == "queued"
        assert items[ids["resume"]]["state_after"] in ("queued", "running")
        for policy, task_id in ids.items():
            status, task = call(f"{url}/v1/tasks/{task_id}", token)
            assert status == 200, task
            if policy != "fail":
                assert task["restarts"] == 1, task
        log = server.stderr()
        assert "recovery: 3 tasks after an unclean shutdown" in log, log[-3000:]
        assert "after you quit" not in log
        assert log.count("recovery: 3 tasks") == 1, log[-3000:]
    finally:
        assert server.terminate() == 0
    # One recovery: one report, and one restart event for each task that goes on.
    conn = sqlite3.connect(f"{(data / 'lmsp.db').as_uri()}?mode=ro", uri=True)
    try:
        (reports,) = conn.execute("SELECT count(*) FROM recovery_reports").fetchone()
        assert reports == 1
        for policy in ("retry", "resume"):
            (restart_events,) = conn.execute(
                "SELECT count(*) FROM task_events WHERE task_id=? AND type IN "
                "('response.queued', 'response.resumed') AND seq > ?",
                (ids[policy], crashed_at[ids[policy]]),
            ).fetchone()
            assert restart_events == 1, (policy, restart_events)
    finally:
        conn.close()


def test_a_first_start_on_a_port_in_use_makes_no_store_and_logs_why(tmp_path: Path) -> None:
    """A brand-new data directory and the port taken: the start says why on stderr and in
    the log file (whoever reads the log, not the terminal: a service manager's user), once
    each, and leaves no empty lmsp.db for the next start to take as its store."""
    data = tmp_path / "new"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        blocked = serve_on(data, port, tmp_path / "cache")
    assert blocked.returncode == 1, blocked.stderr[-3000:]
    said = f"Port {port} on 127.0.0.1 is in use by another program"
    assert blocked.stderr.count(said) == 1, blocked.stderr[-3000:]
    log = (data / "logs" / "lmsp-desktop.log").read_text()
    assert log.count(said) == 1, log[-3000:]
    left = sorted(p.name for p in data.iterdir())
    assert not [name for name in left if name.startswith("lmsp.db")], left
    # What it made is its owner's only, as the 0700 folder is (the log was 0644).
    assert data.stat().st_mode & 0o777 == 0o700
    for made in (data / "lmsp.lock", data / "logs" / "lmsp-desktop.log"):
        assert made.stat().st_mode & 0o777 == 0o600, (made, oct(made.stat().st_mode))
