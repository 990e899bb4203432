"""The service as a bench target: `Core` with a chosen engine, in its own process.

    python -m bench.server --data-dir D --port P [--engine gated|fake|llama]
        [--models-dir M] [--demo] [--threads T] [--parallel N]
        [--max-context N] [--max-loaded N]

Prints one JSON line (url, admin token, when Core.start began and when it was listening)
once it serves, and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

from lmsp_desktop import service_loop
from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.clients import create_client


def make_engine(kind: str, threads: int = 0) -> Any:
    if kind == "llama":
        if threads:
            from lmsp_desktop.core.engines.worker import WorkerEngine

            return WorkerEngine(n_threads=threads)
        return None  # Core's default: a worker process per model, as `serve` runs it
    engine = FakeEngine(tokens=[f" w{i}" for i in range(64)])
    if kind == "gated":
        # The first task the runner picks holds the model forever: the runner costs the same
        # as with a real long generation, and accepting is all that is measured.
        engine.gate = threading.Semaphore(0)
        # Its lanes' threads wait at the gate looking for a stop twice a second, not every
        # 5 ms: four threads looking 200 times a second each took the GIL from the event loop
        # 800 times a second (B1: a create's p50 15.6 against 20.5 ms, its CPU 246 against
        # 278 us). The real engine runs in a worker process and takes none of the service's.
        engine.gate_poll_s = 0.5
    return engine


async def main(args: argparse.Namespace) -> None:
    core = Core(
        Path(args.data_dir),
        model_dirs=[Path(d) for d in args.models_dir],
        port=args.port,
        engine=make_engine(args.engine, args.threads),
        include_demo=args.demo,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    t_start = time.time()
    try:
        await core.start()
        changes: dict[str, Any] = {}
        if args.parallel:
            changes["parallel_per_model"] = args.parallel
        if args.max_context:
            changes["max_context"] = args.max_context
        if args.max_loaded:
            changes["max_loaded_models"] = args.max_loaded
        if changes:
            core.apply_settings(dataclasses.replace(core.settings, **changes))
        t_listening = time.time()
        _, token = await create_client(core.store.db, "bench", frozenset({"admin"}))
        info = {"url": core.url, "token": token, "t_start": t_start, "t_listening": t_listening}
        service_loop.settle_collector()  # as `lmsp-desktop serve` does once it listens
        print(json.dumps(info), flush=True)
        await stop.wait()
    finally:
        await core.stop()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.server")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--engine", choices=["gated", "fake", "llama"], default="gated")
    parser.add_argument("--models-dir", action="append", default=[])
    parser.add_argument("--demo", action="store_true", help="register the demo model")
    parser.add_argument("--threads", type=int, default=0, help="llama.cpp threads (0: default)")
    parser.add_argument(
        "--parallel", type=int, default=0, help="concurrent requests per model (0: default)"
    )
    parser.add_argument(
        "--max-context", type=int, default=0, help="cap on every model's context (0: default)"
    )
    parser.add_argument(
        "--max-loaded", type=int, default=0, help="models loaded at once (0: default)"
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    service_loop.run(main(parse()))  # the loop `lmsp-desktop serve` runs on
