"""B7 GUI: with 100k tasks and 1M events in the database, time to first paint of the window,
event-loop lag p99 (a 10 ms timer's lateness) while 10,000 events/s arrive, peak RSS.

Runs in its own process (`python -m bench.b7_gui DATA_DIR OUT.json SECONDS [EVENTS_PER_S]`) so
the peak RSS is the GUI's alone. It measures the real `MainWindow` over a real `Core` (store,
recovery, registry, runner with the scripted engine, HTTP service on port 0), as `lmsp-desktop`
opens them; the streaming tasks are appended to through the core's store as the runner does.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, percentile
from bench.report import Row
from bench.seed import Shape, seed

STARTED = time.perf_counter()
EVENTS_PER_S = 10_000
TASKS_STREAMING = 4
TICK_S = 0.01  # each streaming task appends every 10 ms: 4 × 25 deltas × 100/s = 10,000/s


def peak_rss_mb() -> float:
    """VmHWM: this process image's peak RSS. (ru_maxrss would carry over the parent's peak
    across fork+exec on Linux, and the bench runner's parent has loaded models by then.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(data_dir: Path, out: Path, seconds: float, events_per_s: int) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import qasync
    from PySide6.QtCore import QEvent, QObject, QSettings, Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from lmsp_desktop.app import Core
    from lmsp_desktop.core.api.responses.request import parse_create
    from lmsp_desktop.core.engines.fake import FakeEngine
    from lmsp_desktop.core.service.host import ServiceHost
    from lmsp_desktop.core.storage.tasks import NewTask
    from lmsp_desktop.gui.main_window import MainWindow

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
        # The window over a real core, opened as `lmsp-desktop` opens them (no demo model:
        # the bench appends to its tasks as the runner would, at a rate it controls).
        core = Core(data_dir, port=0, engine=FakeEngine(), include_demo=False)
        await core.open()
        await core.scan_models()
        result["core_open_s"] = time.perf_counter() - t_open
        # Streaming tasks: the bench is their runner, appending to them through the core's
        # store as the runner does, at a rate it controls (the real runner stays stopped: it
        # would fail tasks of a model it cannot load). The HTTP service runs as in the app.
        request = parse_create({"model": "bench-model", "input": "go", "background": True}, "fail")
        ids = []
        for _ in range(TASKS_STREAMING):
            created = await core.store.tasks.create(NewTask(model="bench-model", request=request))
            await core.store.tasks.mark_running(created.task_id)
            ids.append(created.task_id)
        core.upstreams.start()
        assert core.listener is not None  # open() bound the port
        core.host = ServiceHost(core.context, core.listener)
        core.url = await core.host.start()
        ini = Path(tempfile.mkdtemp()) / "gui.ini"
        window = MainWindow(core, QSettings(str(ini), QSettings.Format.IniFormat))
        result["measured"] = "MainWindow over a real Core"
        watch = PaintWatch(window.tasks.model.rowCount)
        window.tasks.table.viewport().installEventFilter(watch)
        window.resize(1200, 800)
        window.show()
        result["window_shown_s"] = time.perf_counter() - t_open
        await window.load()
        result["window_loaded_s"] = time.perf_counter() - t_open
        await asyncio.wait_for(watch.painted.wait(), 30)
        result["first_paint_s"] = (watch.at or float("nan")) - t_open
        result["process_to_paint_s"] = (watch.at or float("nan")) - STARTED
        store = core.store

        per_tick = max(1, round(events_per_s * TICK_S / TASKS_STREAMING))
        tokens: dict[str, list[int]] = {i: [] for i in ids}

        async def stream(task_id: str, seconds: float, sent: list[int]) -> None:
            done = tokens[task_id]
            deadline = time.perf_counter() + seconds
            next_at = time.perf_counter()
            while time.perf_counter() < deadline:
                done.extend(range(len(done), len(done) + per_tick))
                appended = await store.tasks.append_deltas(
                    task_id,
                    [f" w{t}" for t in done[-per_tick:]],
                    output_tokens=len(done),
                    input_tokens=3,
                    snapshot={"tokens": done[-64:], "seed": 1},
                )
                if not appended:
                    raise RuntimeError(f"{task_id} stopped running: nothing measured")
                sent[0] += per_tick
                next_at += TICK_S
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))

        async def measure(seconds: float) -> tuple[list[float], float]:
            """The lateness of a 10 ms timer (ms) while the tasks stream; events/s sent."""
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
            timer.start()
            started = time.perf_counter()
            await asyncio.gather(*(stream(i, seconds, sent) for i in ids))
            elapsed = time.perf_counter() - started
            timer.stop()
            return lateness, sent[0] / elapsed

        lateness, result["events_per_s"] = await measure(seconds)
        result["lag_p99_ms"] = percentile(lateness, 99)
        result["lag_max_ms"] = max(lateness) if lateness else float("nan")
        result["peak_rss_mb"] = peak_rss_mb()
        # The window kept up (else a quiet loop would only mean a window that stopped
        # listening): after one more flush its rows show every token sent.
        await asyncio.sleep(0.5)
        shown = [window.tasks.model.task(i) for i in ids]
        result["tokens_shown"] = sum(r.output_tokens for r in shown if r is not None)
        result["tokens_sent"] = sum(len(t) for t in tokens.values())
        # The peer, in the same process and minutes: the same stream with the window hidden
        # in the tray (the bridge only records), i.e. what the core alone costs the loop.
        window.hide()
        lateness, result["peer_events_per_s"] = await measure(seconds)
        result["peer_lag_p99_ms"] = percentile(lateness, 99)
        window.quitting = True
        window.stop_updates()
        window.close()
        await core.stop()

    profile_to = os.environ.get("B7_PROFILE")  # a cProfile stats file: where the loop's time goes
    if profile_to:
        import cProfile

        with cProfile.Profile() as profiler:
            loop.run_until_complete(main())
        profiler.dump_stats(profile_to)
    else:
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
            "GUI time to first paint (core open → tasks table painted)",
            found["first_paint_s"] * 1000,
            "ms",
            "≤ 1 s",
            None,
            "",
            found["first_paint_s"] <= 1.0,
            note=(
                f"{what}; process start → paint {found['process_to_paint_s']:.2f} s; of which "
                f"the core's open (integrity check, recovery, scan) "
                f"{found['core_open_s']:.2f} s and the window (built, shown, first page "
                f"painted) {found['first_paint_s'] - found['core_open_s']:.2f} s"
            ),
        ),
        Row(
            "B7",
            f"GUI event-loop lag p99, {found['events_per_s']:,.0f} events/s arriving",
            found["lag_p99_ms"],
            "ms",
            "≤ 16 ms (one frame)",
            found["lag_p99_ms"] / found["peer_lag_p99_ms"],
            "the same stream with the window hidden",
            found["lag_p99_ms"] <= 16,
            note=(
                f"max {found['lag_max_ms']:.1f} ms; lateness of a 10 ms PreciseTimer; "
                f"window hidden (peer): p99 {found['peer_lag_p99_ms']:.1f} ms at "
                f"{found['peer_events_per_s']:,.0f} events/s; the window showed "
                f"{found['tokens_shown']:,} of {found['tokens_sent']:,} tokens sent"
            ),
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
    rate = int(sys.argv[4]) if len(sys.argv) > 4 else EVENTS_PER_S
    _child(Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), rate)
