"""Probe `lmsp-desktop serve` for crashes at shutdown: SIGTERM while the demo model loads or
has just loaded, many times, and count the exit codes (0 is a clean stop; -11 SIGSEGV and -6
SIGABRT are crashes).

    python scripts/shutdown_probe.py --runs 60                 # SIGTERM 0.15-0.5 s after submit
    python scripts/shutdown_probe.py --runs 60 --at running    # as soon as the task runs

Each run uses a fresh data directory on port 0 and submits one background task for the demo
model. A crashed run keeps its directory (stderr with Python's fault handler output, and a
`core` file where the system writes cores to the working directory) for gdb; clean runs are
removed.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.serve_process import LISTENING, call, create_token

SERVE = ("serve", "--port", "0")
BODY = {
    "model": "smollm2-135m-instruct",
    "input": "Tell me a story.",
    "background": True,
    "max_output_tokens": 64,
}


def allow_cores() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def start(run: Path) -> tuple[subprocess.Popen[str], str]:
    with (run / "stderr").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(run / "data"), *SERVE],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=run,
            preexec_fn=allow_cores,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"},
        )
    assert proc.stdout is not None
    for line in proc.stdout:
        found = LISTENING.match(line.strip())
        if found:
            return proc, found.group(1)
    raise SystemExit(f"serve did not start: {(run / 'stderr').read_text()[-2000:]}")


def wait_running(url: str, token: str, task_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        _status, task = call(f"{url}/v1/tasks/{task_id}", token)
        if task["state"] not in ("queued", "loading"):
            return
        time.sleep(0.005)


def probe(run: Path, at: str) -> Any:
    token = create_token(run / "data")
    proc, url = start(run)
    try:
        status, created = call(f"{url}/v1/responses", token, "POST", BODY)
        assert status == 202, created
        if at == "running":
            wait_running(url, token, created["id"])
        else:
            time.sleep(random.uniform(0.15, 0.5))
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return "hang"
    finally:
        assert proc.stdout is not None
        proc.stdout.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--at", choices=["random", "running"], default="random")
    parser.add_argument("--keep", type=Path, default=None, help="where crashed runs are kept")
    args = parser.parse_args()
    keep = args.keep or Path(tempfile.mkdtemp(prefix="lmsp-shutdown-probe-"))
    codes: Counter[Any] = Counter()
    for index in range(args.runs):
        run = keep / f"run{index}"
        run.mkdir(parents=True)
        code = probe(run, args.at)
        codes[code] += 1
        print(f"run {index}: exit {code}", flush=True)
        if code == 0:
            shutil.rmtree(run)
    print(f"exit codes over {args.runs} runs: {dict(codes)}; crashed runs kept in {keep}")
    return 0 if set(codes) == {0} else 1


if __name__ == "__main__":
    sys.exit(main())
