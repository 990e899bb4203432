"""The engine worker's OpenMP wait policy through a real service (issue 21; docs/engine.md,
"OpenMP wait policy"): decode tok/s of `bench.server` streaming the demo model, with its
worker under each policy, in four scenarios: (a) one stream on an idle machine; (b) one
stream beside a CPU hog (`sh -c 'while :; do :; done'`); (c) two models (two workers: the
demo model and a copy of it) streaming at once, the two rates summed; (d) four concurrent
streams on one model (B9's shape), summed. Each stream is cut 8 s after its first token
(its rate counts the tokens it made). The policies run in rounds, the order turning each
round; each prints one JSON line per round.

    python -m bench.omp_policy [--rounds 3] [--threads 2] [--only abcd]
        [--policies passive,spin3000,spin10000,spin30000,default]

`--threads 0` leaves the worker's thread count to the service (one less than the cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import BenchServer, demo_model
from bench.llm import MODEL_ID, body

CAP_S = 8.0
# The worker inherits the service's environment; `llama_native.lowlevel` sets passive only
# when OMP_WAIT_POLICY is unset, so llama.cpp's default takes a value libgomp does not know
# (it warns and falls back to its default: spin 300,000 times at a barrier, then sleep).
DEFAULT_POLICY = {"OMP_WAIT_POLICY": "libgomp-default"}


def policy_env(name: str) -> dict[str, str]:
    if name == "default":
        return DEFAULT_POLICY
    if name.startswith("spin"):  # passive, but spin this many times before sleeping
        return {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": name.removeprefix("spin")}
    assert name == "passive", name
    return {"OMP_WAIT_POLICY": "passive"}


async def stream(server: BenchServer, model: str, max_tokens: int = 128) -> float:
    headers = {"Authorization": f"Bearer {server.token}"}
    url = f"http://127.0.0.1:{server.port}/v1/responses"
    request = {**body(max_tokens), "model": model}
    times: list[float] = []
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session,
        session.post(url, json=request, headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            line = raw.decode()
            if not line.startswith("data: "):
                continue
            kind = json.loads(line[6:])["type"]
            if kind == "response.output_text.delta":
                times.append(time.perf_counter())
                if times[-1] - times[0] > CAP_S:
                    break  # the service cancels the task when the client goes
            elif kind in ("response.completed", "response.incomplete", "response.failed"):
                break
    if len(times) < 2:
        return math.nan
    return (len(times) - 1) / (times[-1] - times[0])


async def other_model(server: BenchServer) -> str:
    headers = {"Authorization": f"Bearer {server.token}"}
    url = f"http://127.0.0.1:{server.port}/v1/models"
    for _ in range(120):
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
            ids = [m["id"] for m in (await r.json())["data"] if m["owned_by"] == "local"]
        if others := [i for i in ids if i != MODEL_ID]:
            return str(others[0])
        await asyncio.sleep(0.5)
    raise RuntimeError("the copy of the demo model was not listed")


async def scenarios(server: BenchServer, only: str) -> dict[str, Any]:
    other = await other_model(server)
    for model in (MODEL_ID, other):  # loads both workers and warms them up
        await stream(server, model, 16)
    found: dict[str, Any] = {}
    if "a" in only:
        found["a_idle"] = await stream(server, MODEL_ID)
    if "b" in only:
        hog = await asyncio.create_subprocess_exec("sh", "-c", "while :; do :; done")
        try:
            await asyncio.sleep(0.5)
            found["b_hog"] = await stream(server, MODEL_ID)
        finally:
            hog.kill()
            await hog.wait()
    if "c" in only:
        rates = list(await asyncio.gather(stream(server, MODEL_ID), stream(server, other)))
        found["c_two_models"], found["c_each"] = sum(rates), rates
    if "d" in only:
        rates = await asyncio.gather(*(stream(server, MODEL_ID) for _ in range(4)))
        found["d_four_streams"], found["d_each"] = sum(rates), rates
    return found


def run_one(work: Path, models: Path, name: str, threads: int, only: str) -> dict[str, Any]:
    args = ["--engine", "llama", "--demo", "--models-dir", str(models), "--max-loaded", "2"]
    if threads:
        args += ["--threads", str(threads)]
    server = BenchServer(work / name, *args)
    saved = os.environ.copy()
    os.environ.pop("GOMP_SPINCOUNT", None)
    os.environ.update(policy_env(name))  # BenchServer hands its environment to `serve`
    try:
        server.start()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        return asyncio.run(scenarios(server, only))
    finally:
        assert server.proc is not None
        server.proc.terminate()
        server.proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.omp_policy")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="abcd")
    parser.add_argument("--policies", default="passive,spin3000,spin10000,spin30000,default")
    args = parser.parse_args()
    names = args.policies.split(",")
    with tempfile.TemporaryDirectory(prefix="omp-policy-") as tmp:
        work, models = Path(tmp), Path(tmp) / "models"
        models.mkdir()
        shutil.copyfile(demo_model(), models / "Other-SmolLM2-135M.gguf")
        for i in range(args.rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                found = run_one(work / str(i), models, name, args.threads, args.only)
                load = Path("/proc/loadavg").read_text().split()[0]
                line = {"round": i, "policy": name, "threads": args.threads, "load": load}
                print(json.dumps({**line, **found}), flush=True)


if __name__ == "__main__":
    main()
