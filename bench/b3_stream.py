"""B3 streaming overhead: tokens/s of one task streamed over SSE by the service, against the
same prompt and settings in-process through the project's engine and through plain
llama_cpp.Llama.create_completion (the limit)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.common import BenchServer
from bench.llm import Stream, best, in_subprocess, sse_generate
from bench.report import Row
from lmsp_desktop.core.engines.llama import DEFAULT_THREADS


async def _measure(work: Path, max_tokens: int, repeats: int) -> dict[str, list[Stream]]:
    found: dict[str, list[Stream]] = {"sse": [], "engine": [], "llama": []}
    # The same llama.cpp thread count as the in-process baselines (the service's own default
    # is one less than the cores, which on 2 cores is 1: "same settings" means the same here).
    with BenchServer(
        work / "b3", "--engine", "llama", "--demo", "--threads", str(DEFAULT_THREADS)
    ) as server:
        server.start()
        await sse_generate(server, max_tokens)  # loads the model and warms it up
        for _ in range(repeats):
            # Interleaved, so slow phases of the shared machine hit all three alike; the
            # in-process baselines each run in a fresh process of their own.
            found["sse"].append(await sse_generate(server, max_tokens))
            found["engine"].append(await asyncio.to_thread(in_subprocess, "engine", max_tokens))
            found["llama"].append(await asyncio.to_thread(in_subprocess, "llama", max_tokens))
    return found


def run(work: Path, quick: bool) -> list[Row]:
    max_tokens, repeats = (16, 1) if quick else (128, 3)
    found = asyncio.run(_measure(work, max_tokens, repeats))
    sse, engine, llama = (best(found[k]) for k in ("sse", "engine", "llama"))
    counts = "/".join(str(len(s.times)) for s in (sse, engine, llama))
    return [
        Row(
            "B3",
            "llama_cpp create_completion in-process (greedy)",
            llama.rate(),
            "tok/s",
            note=f"best of {repeats}; tokens per run SSE/engine/llama_cpp: {counts}; "
            "decode rate, prompt processing excluded",
        ),
        Row(
            "B3",
            "project engine in-process (per-token path)",
            engine.rate(),
            "tok/s",
            "",
            engine.rate() / llama.rate(),
            "llama_cpp",
        ),
        Row(
            "B3",
            "SSE stream from the service vs engine in-process",
            sse.rate(),
            "tok/s",
            "≥ 0.97×",
            sse.rate() / engine.rate(),
            "engine",
            sse.rate() >= 0.97 * engine.rate(),
        ),
        Row(
            "B3",
            "SSE stream from the service vs llama_cpp",
            sse.rate(),
            "tok/s",
            "≥ 0.97×",
            sse.rate() / llama.rate(),
            "llama_cpp",
            sse.rate() >= 0.97 * llama.rate(),
        ),
    ]
