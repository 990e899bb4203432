"""B3 streaming overhead: tokens/s of one task streamed over SSE by the service, against the
same prompt and settings in-process through the project's engine and through plain
llama_cpp.Llama.create_completion (the limit).

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
from bench.llm import MODEL_ID, Stream, best, in_subprocess, sse_generate
from bench.report import Row
from lmsp_desktop.core.engines.llama import DEFAULT_THREADS

KINDS = ("sse", "engine", "llama")


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
            # Each kind goes first, second and third in turn; the in-process baselines each
            # run in a fresh process of their own (warmed up there first).
            for kind in KINDS[i % 3 :] + KINDS[: i % 3]:
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
    sse, engine = found.streams["sse"], found.streams["engine"]
    vs_engine = statistics.median(found.ratios("sse", "engine"))
    vs_llama = statistics.median(found.ratios("sse", "llama"))
    engine_vs_llama = statistics.median(found.ratios("engine", "llama"))
    median_rate = {k: statistics.median(s.rate() for s in found.streams[k]) for k in KINDS}
    best_vs_best = best(sse).rate() / best(engine).rate()
    per_token_ms = {
        "serve": 1000 * found.serve_cpu_s / found.tokens("sse"),
        "service": 1000 * (found.serve_cpu_s + found.worker_cpu_s) / found.tokens("sse"),
        "engine": 1000 * sum(s.cpu_s for s in engine) / found.tokens("engine"),
    }
    method = (
        f"{rounds} rounds of {max_tokens} tokens, the order turning each round; "
        "figure: median tok/s; ratio: median of the rounds' ratios"
    )
    return [
        Row(
            "B3",
            "llama_cpp create_completion in-process (greedy)",
            median_rate["llama"],
            "tok/s",
            note=f"{method}; decode rate, prompt processing excluded",
        ),
        Row(
            "B3",
            "project engine in-process (per-token path)",
            median_rate["engine"],
            "tok/s",
            "",
            engine_vs_llama,
            "llama_cpp",
            note=f"{_spread(found.ratios('engine', 'llama'))}; CPU per token "
            f"{per_token_ms['engine']:.2f} ms (the whole process, decode threads included)",
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
            note=f"{_spread(found.ratios('sse', 'engine'))}, best vs best "
            f"{best_vs_best:.2f}×; CPU per token: serve {per_token_ms['serve']:.2f} ms, "
            f"serve + worker {per_token_ms['service']:.2f} ms "
            f"(engine in-process {per_token_ms['engine']:.2f} ms)",
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
            note=_spread(found.ratios("sse", "llama")),
        ),
    ]
