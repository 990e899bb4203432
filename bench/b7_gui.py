"""B7 GUI: with 100k tasks and 1M events in the database, time to first paint of the window,
event-loop lag p99 (a 10 ms timer's lateness) while 2,000 events/s arrive, peak RSS.

Runs in its own process (`python -m bench.b7_gui DATA_DIR OUT.json SECONDS`) so the peak
RSS is the GUI's alone. It measures lmsp_desktop.gui.main_window.MainWindow when that
exists and takes a Core; otherwise the Tasks page (the window's main content) fed by the
CoreBridge, and says which in the result.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, percentile
from bench.report import Row
from bench.seed import Shape, seed

STARTED = time.perf_counter()
EVENTS_PER_S = 2000
TASKS_STREAMING = 4
TICK_S = 0.01  # each streaming task appends every 10 ms: 4 × 5 deltas × 100/s = 2,000/s


def peak_rss_mb() -> float:
    """VmHWM: this process image's peak RSS. (ru_maxrss would carry over the parent's peak
    across fork+exec on Linux, and the bench runner's parent has loaded models by then.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(data_dir: Path, out: Path, seconds: float) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import qasync
    from PySide6.QtCore import QEvent, QObject, Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from lmsp_desktop.core.pairing import PairingManager
    from lmsp_desktop.core.requests import parse_create
    from lmsp_desktop.core.storage.store import Store
    from lmsp_desktop.core.storage.tasks import NewTask
    from lmsp_desktop.gui.bridge import CoreBridge
    from lmsp_desktop.gui.pages.tasks_page import TasksPage
    from tests.support.gui_core import FakeCore

    app = QApplication.instance() or QApplication([])
    app.setQuitOnLastWindowClosed(False)  # type: ignore[attr-defined]
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    result: dict[str, Any] = {}

    class PaintWatch(QObject):
        """Notes the first paint of the table's viewport once it has rows to show."""

        def __init__(self, rows: Any) -> None:
            super().__init__()
            self.rows = rows
            self.at: float | None = None
            self.painted = asyncio.Event()

        def eventFilter(self, obj: QObject, event: QEvent) -> bool:
            if self.at is None and event.type() == QEvent.Type.Paint and self.rows() > 0:
                self.at = time.perf_counter()
                self.painted.set()
            return False

    async def main() -> None:
        t_open = time.perf_counter()
        store = Store(data_dir)
        await store.open()
        # The window's seam over the real store (no runner: the bench appends as one would).
        core = FakeCore(store, data_dir, PairingManager(store.db))
        bridge = CoreBridge(core)
        window: Any = TasksPage(core, url="http://127.0.0.1:5677")
        result["measured"] = "TasksPage + CoreBridge (no MainWindow in lmsp_desktop.gui yet)"
        bridge.tasks_changed.connect(window.on_changes)
        watch = PaintWatch(window.model.rowCount)
        window.table.viewport().installEventFilter(watch)
        window.resize(1200, 800)
        window.show()
        await window.load()
        await asyncio.wait_for(watch.painted.wait(), 30)
        result["first_paint_s"] = (watch.at or float("nan")) - t_open
        result["process_to_paint_s"] = (watch.at or float("nan")) - STARTED

        # Streaming tasks, appended to through the store exactly as the runner does.
        request = parse_create({"model": "bench-model", "input": "go", "background": True}, "fail")
        ids = []
        for _ in range(TASKS_STREAMING):
            created = await store.tasks.create(NewTask(model="bench-model", request=request))
            await store.tasks.mark_running(created.task_id)
            ids.append(created.task_id)
        per_tick = int(EVENTS_PER_S * TICK_S / TASKS_STREAMING)
        lateness: list[float] = []
        expected = [0.0]

        def tick() -> None:
            now = time.perf_counter()
            if expected[0]:
                lateness.append(max(0.0, now - expected[0]) * 1000)
            expected[0] = now + TICK_S

        timer = QTimer()
        timer.setTimerType(Qt.TimerType.PreciseTimer)
        timer.setInterval(int(TICK_S * 1000))
        timer.timeout.connect(tick)
        sent = [0]

        async def stream(task_id: str) -> None:
            tokens: list[int] = []
            deadline = time.perf_counter() + seconds
            next_at = time.perf_counter()
            while time.perf_counter() < deadline:
                tokens.extend(range(len(tokens), len(tokens) + per_tick))
                await store.tasks.append_deltas(
                    task_id,
                    [f" w{t}" for t in tokens[-per_tick:]],
                    output_tokens=len(tokens),
                    input_tokens=3,
                    snapshot={"tokens": tokens[-64:], "seed": 1},
                )
                sent[0] += per_tick
                next_at += TICK_S
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))

        timer.start()
        started = time.perf_counter()
        await asyncio.gather(*(stream(i) for i in ids))
        elapsed = time.perf_counter() - started
        timer.stop()
        result["events_per_s"] = sent[0] / elapsed
        result["lag_p99_ms"] = percentile(lateness, 99)
        result["lag_max_ms"] = max(lateness) if lateness else float("nan")
        result["peak_rss_mb"] = peak_rss_mb()
        bridge.close()
        window.close()
        await store.close()

    loop.run_until_complete(main())
    out.write_text(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # measured and written: skip Qt's teardown, which is not under test


def run(work: Path, quick: bool) -> list[Row]:
    shape = Shape(tasks=2000, events_per_task=10) if quick else Shape(100_000, 10)
    data_dir = work / "b7"
    events = seed(data_dir, shape)
    out = work / "b7.json"
    seconds = 1.0 if quick else 5.0
    subprocess.run(
        [sys.executable, "-m", "bench.b7_gui", str(data_dir), str(out), str(seconds)],
        cwd=ROOT,
        check=True,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
        timeout=180,
    )
    found = json.loads(out.read_text())
    what = f"{shape.tasks:,} tasks, {events:,} events; measured: {found['measured']}"
    return [
        Row(
            "B7",
            "GUI time to first paint (store open → table painted)",
            found["first_paint_s"] * 1000,
            "ms",
            "≤ 1.5 s",
            None,
            "",
            found["first_paint_s"] <= 1.5,
            note=f"{what}; process start → paint {found['process_to_paint_s']:.2f} s",
        ),
        Row(
            "B7",
            f"GUI event-loop lag p99, {found['events_per_s']:,.0f} events/s arriving",
            found["lag_p99_ms"],
            "ms",
            "≤ 50 ms",
            None,
            "",
            found["lag_p99_ms"] <= 50,
            note=f"max {found['lag_max_ms']:.1f} ms; lateness of a 10 ms PreciseTimer",
        ),
        Row(
            "B7",
            "GUI peak RSS",
            found["peak_rss_mb"],
            "MB",
            "≤ 400 MB",
            None,
            "",
            found["peak_rss_mb"] <= 400,
        ),
    ]


if __name__ == "__main__":
    _child(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]))
