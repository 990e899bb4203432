"""B4 recovery: a database with 100k tasks of which 10k unfinished (all four unfinished
states × three policies) → time from Core.start until /v1/health answers."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench.common import BenchServer, make_gguf
from bench.report import Row
from bench.seed import Shape, seed


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


def startup(data_dir: Path, models: Path) -> tuple[float, float, int]:
    """(Core.start → health s, process spawn → health s, recovered task count)."""
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
        return healthy - info["t_start"], healthy - server.spawned_at, items


def run(work: Path, quick: bool) -> list[Row]:
    shape = Shape(tasks=2000, events_per_task=10, unfinished=200)
    if not quick:
        shape = Shape(tasks=100_000, events_per_task=10, unfinished=10_000)
    models = work / "b4-models"
    models.mkdir(parents=True, exist_ok=True)
    make_gguf(models / "bench-model.gguf", "bench-model")
    empty_core, empty_spawn, _ = startup(work / "b4-empty", models)
    started = time.perf_counter()
    events = seed(work / "b4-full", shape)
    built = time.perf_counter() - started
    core_s, spawn_s, recovered = startup(work / "b4-full", models)
    if recovered != shape.unfinished:
        raise AssertionError(f"recovered {recovered} tasks, expected {shape.unfinished}")
    return [
        Row(
            "B4",
            "startup, empty database: Core.start → health",
            empty_core,
            "s",
            note=f"process spawn → health {empty_spawn:.2f} s (Python imports included)",
        ),
        Row(
            "B4",
            f"recovery startup, {shape.tasks:,} tasks / {shape.unfinished:,} unfinished",
            core_s,
            "s",
            "≤ 1 s",
            core_s / empty_core,
            "empty",
            core_s <= 1.0,
            note=f"Core.start → health; spawn → health {spawn_s:.2f} s; {events:,} events; "
            f"recovered {recovered:,} (checked via /v1/recovery/last); DB built in {built:.1f} s",
        ),
    ]
