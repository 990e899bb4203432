"""B3 streaming overhead: tokens/s of one task streamed over SSE by the service, against the
same prompt and settings in-process through the project's engine and through plain
llama_cpp.Llama.create_completion (the limit).

The in-process engine does the work the service's worker does (tokens handed over in groups
of the runner's commit interval), and runs twice per round: with the OpenMP wait policy the
worker has (passive) and with llama.cpp's default (spinning a while at each barrier). The
verdict is against the engine with the worker's settings (passive): B3 is what the process
boundary costs. The wait policy is a choice of its own, shown in a row of its own (the
default-policy engine against the passive one): spinning is faster on an idle machine and
several times slower once other work shares the cores (docs/engine.md, "OpenMP wait
policy"), and the app shares the machine with its user's work.

One run decides: the three are measured in rounds (each round runs each once, in an order
that turns round by round, so a slow phase of the shared machine hits all alike), and the
verdict is the median of the rounds' SSE/engine ratios; the rows' notes give the spread of
those ratios and the best against the best. The cost that decides B3 on a machine whose
cores llama.cpp fills is CPU: the service's (serve and its engine worker, /proc/PID/stat)
per streamed token against the in-process engine's (its whole process, time.process_time)."""

from __future__ import annotations

import asyncio
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.common import BenchServer
from bench.llm import (
    ENGINE,
    ENGINE_OMP_DEFAULT,
    LLAMA,
    MODEL_ID,
    Stream,
    best,
    in_subprocess,
    sse_generate,
)
from bench.report import Row
from lmsp_desktop.core.engines.llama_layout import DEFAULT_THREADS

KINDS = ("sse", ENGINE, ENGINE_OMP_DEFAULT, LLAMA)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (fields 14 and 15 of /proc/PID/stat, all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def engine_pid(server: BenchServer) -> int:
    headers = {"Authorization": f"Bearer {server.token}"}
    url = f"http://127.0.0.1:{server.port}/v1/models/{MODEL_ID}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as resp:
        return int((await resp.json())["engine_pid"])


@dataclass
class Found:
    streams: dict[str, list[Stream]]
    serve_cpu_s: float = 0.0  # over all SSE runs
    worker_cpu_s: float = 0.0

    def tokens(self, kind: str) -> int:
        return sum(len(s.times) for s in self.streams[kind])

    def ratios(self, kind: str, of: str) -> list[float]:
        pairs = zip(self.streams[kind], self.streams[of], strict=True)
        return [a.rate() / b.rate() for a, b in pairs]


async def _measure(work: Path, max_tokens: int, rounds: int) -> Found:
    found = Found({k: [] for k in KINDS})
    # The same llama.cpp thread count as the in-process baselines (the service's own default
    # is one less than the cores, which on 2 cores is 1: "same settings" means the same here).
    with BenchServer(
        work / "b3", "--engine", "llama", "--demo", "--threads", str(DEFAULT_THREADS)
    ) as server:
        server.start()
        await sse_generate(server, max_tokens)  # loads the model and warms it up
        assert server.proc is not None
        pids = (server.proc.pid, await engine_pid(server))
        for i in range(rounds):
            # Each kind goes first, second, ... in turn; the in-process baselines each run
            # in a fresh process of their own (warmed up there first).
            for kind in KINDS[i % len(KINDS) :] + KINDS[: i % len(KINDS)]:
                if kind == "sse":
                    before = [cpu_seconds(p) for p in pids]
                    found.streams[kind].append(await sse_generate(server, max_tokens))
                    after = [cpu_seconds(p) for p in pids]
                    found.serve_cpu_s += after[0] - before[0]
                    found.worker_cpu_s += after[1] - before[1]
                else:
                    stream = await asyncio.to_thread(in_subprocess, kind, max_tokens)
                    found.streams[kind].append(stream)
    return found


def _spread(ratios: list[float]) -> str:
    return f"median {statistics.median(ratios):.2f}×, rounds {min(ratios):.2f}-{max(ratios):.2f}×"


def run(work: Path, quick: bool) -> list[Row]:
    max_tokens, rounds = (16, 1) if quick else (128, 8)
    found = asyncio.run(_measure(work, max_tokens, rounds))
    median_rate = {k: statistics.median(s.rate() for s in found.streams[k]) for k in KINDS}
    # The peer: the engine in-process with the worker's settings (the wait policy included).
    peer = ENGINE
    sse, engine = found.streams["sse"], found.streams[peer]
    vs_engine = statistics.median(found.ratios("sse", peer))
    vs_llama = statistics.median(found.ratios("sse", LLAMA))
    best_vs_best = best(sse).rate() / best(engine).rate()
    per_token_ms = {
        "serve": 1000 * found.serve_cpu_s / found.tokens("sse"),
        "service": 1000 * (found.serve_cpu_s + found.worker_cpu_s) / found.tokens("sse"),
    }
    for kind in (ENGINE, ENGINE_OMP_DEFAULT):
        cpu = sum(s.cpu_s for s in found.streams[kind])
        per_token_ms[kind] = 1000 * cpu / found.tokens(kind)
    method = (
        f"{rounds} rounds of {max_tokens} tokens, the order turning each round; "
        "figure: median tok/s; ratio: median of the rounds' ratios"
    )
    engine_work = (
        "tokens handed over every 100 ms as the worker does; CPU per token "
        "{:.2f} ms (the whole process, decode threads included)"
    )
    return [
        Row(
            "B3",
            "llama_cpp create_completion in-process (greedy)",
            median_rate[LLAMA],
            "tok/s",
            note=f"{method}; decode rate, prompt processing excluded",
        ),
        Row(
            "B3",
            "project engine in-process, OMP_WAIT_POLICY=passive (the worker's)",
            median_rate[ENGINE],
            "tok/s",
            "",
            statistics.median(found.ratios(ENGINE, LLAMA)),
            "llama_cpp",
            note=f"{_spread(found.ratios(ENGINE, LLAMA))}; "
            + engine_work.format(per_token_ms[ENGINE]),
        ),
        Row(
            "B3",
            "project engine in-process, llama.cpp's default OpenMP wait policy",
            median_rate[ENGINE_OMP_DEFAULT],
            "tok/s",
            "",
            statistics.median(found.ratios(ENGINE_OMP_DEFAULT, ENGINE)),
            "passive",
            note="no goal: the worker runs passive by choice (beside two busy processes on 2 "
            "cores: passive 49-52 tok/s, default 21.5, ggml's own thread pool 8-10; "
            "docs/engine.md); "
            + _spread(found.ratios(ENGINE_OMP_DEFAULT, ENGINE))
            + "; "
            + engine_work.format(per_token_ms[ENGINE_OMP_DEFAULT])
            + "; each run stopped after 10 s",
        ),
        Row(
            "B3",
            "SSE stream from the service vs engine in-process",
            median_rate["sse"],
            "tok/s",
            "≥ 0.97×",
            vs_engine,
            "engine",
            vs_engine >= 0.97,
            note=f"against the engine with the worker's settings (passive wait policy); "
            f"{_spread(found.ratios('sse', peer))}, best vs best "
            f"{best_vs_best:.2f}×; serve commits each 100 ms group and writes SSE, the "
            f"client reads and parses every event; CPU per token: serve "
            f"{per_token_ms['serve']:.2f} ms, serve + worker {per_token_ms['service']:.2f} ms "
            f"(engine in-process {per_token_ms[peer]:.2f} ms)",
        ),
        Row(
            "B3",
            "SSE stream from the service vs llama_cpp",
            median_rate["sse"],
            "tok/s",
            "≥ 0.97×",
            vs_llama,
            "llama_cpp",
            vs_llama >= 0.97,
            note=_spread(found.ratios("sse", LLAMA)),
        ),
    ]
