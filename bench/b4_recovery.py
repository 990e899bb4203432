"""B4 recovery: a database with 100k tasks of which 10k unfinished (all four unfinished
states × three policies) → time from Core.start until /v1/health answers."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.common import BenchServer, make_gguf
from bench.report import Row
from bench.seed import Shape, seed
from lmsp_desktop.core.config import database_path


def _poll_health(port: int, timeout: float = 300.0) -> float:
    """time.time() of the first 200 from /v1/health."""
    url = f"http://127.0.0.1:{port}/v1/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return time.time()
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.002)
    raise RuntimeError("the service did not answer /v1/health in time")


@dataclass
class Startup:
    core_s: float  # Core.start → health
    spawn_s: float  # process spawn → health
    listening_s: float  # Core.start → listening
    recovered: int
    recovery_s: float | None  # recovery's work, the report's own times (None: no report)
    wal_mb: float  # the WAL file's size once health answered: its largest commit


def _recovery_s(data_dir: Path) -> float | None:
    """Recovery's own time as its report recorded it (None: no report)."""
    conn = sqlite3.connect(f"{database_path(data_dir).as_uri()}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT finished_at - started_at FROM recovery_reports ORDER BY n DESC LIMIT 1"
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else float(row[0])


def startup(data_dir: Path, models: Path) -> Startup:
    """Start the service on `data_dir` once and time it (see Startup)."""
    with BenchServer(data_dir, "--engine", "gated", "--models-dir", str(models)) as server:
        server.spawn()
        healthy = _poll_health(server.port)
        info = server.wait_ready()
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/v1/recovery/last",
            headers={"Authorization": f"Bearer {server.token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                items = len(json.loads(resp.read())["items"])
        except urllib.error.HTTPError as exc:
            exc.close()  # it holds the open response: close it, or its socket leaks
            if exc.code != 404:  # 404: no recovery report (nothing was left unfinished)
                raise
            items = 0
        # While it runs: the last connection to close removes the file. The first commit
        # is recovery's (the fixture has no WAL) and a PASSIVE checkpoint never shrinks it.
        wal = Path(f"{database_path(data_dir)}-wal")
        wal_mb = wal.stat().st_size / 1e6 if wal.exists() else 0.0
        return Startup(
            core_s=healthy - info["t_start"],
            spawn_s=healthy - server.spawned_at,
            listening_s=info["t_listening"] - info["t_start"],
            recovered=items,
            recovery_s=_recovery_s(data_dir) if items else None,
            wal_mb=wal_mb,
        )


def run(work: Path, quick: bool) -> list[Row]:
    shape = Shape(tasks=2000, events_per_task=10, unfinished=200)
    if not quick:
        shape = Shape(tasks=100_000, events_per_task=10, unfinished=10_000)
    models = work / "b4-models"
    models.mkdir(parents=True, exist_ok=True)
    make_gguf(models / "bench-model.gguf", "bench-model")
    empty = startup(work / "b4-empty", models)
    started = time.perf_counter()
    events = seed(work / "b4-full", shape)
    built = time.perf_counter() - started
    full = startup(work / "b4-full", models)
    if full.recovered != shape.unfinished:
        raise AssertionError(f"recovered {full.recovered} tasks, expected {shape.unfinished}")
    recovery = "no report" if full.recovery_s is None else f"{full.recovery_s:.2f} s"
    return [
        Row(
            "B4",
            "startup, empty database: Core.start → health",
            empty.core_s,
            "s",
            note=f"process spawn → health {empty.spawn_s:.2f} s (Python imports included)",
        ),
        Row(
            "B4",
            f"recovery startup, {shape.tasks:,} tasks / {shape.unfinished:,} unfinished",
            full.core_s,
            "s",
            "≤ 1 s",
            full.core_s / empty.core_s,
            "empty",
            full.core_s <= 1.0,
            note=f"Core.start → health; spawn → health {full.spawn_s:.2f} s; {events:,} events; "
            f"recovered {full.recovered:,} (checked via /v1/recovery/last); of the start: "
            f"recovery's work {recovery} (its report's times, before its commit), listening "
            f"at {full.listening_s:.2f} s, WAL {full.wal_mb:.1f} MB; DB built in {built:.1f} s",
        ),
    ]
