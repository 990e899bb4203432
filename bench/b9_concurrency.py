"""B9 concurrent streams: aggregate tokens/s of 1, 2, 4 and 8 streaming requests to one model
of the service at once (one loaded copy, its sequences decoded together), against one."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import aiohttp

from bench.common import BenchServer
from bench.llm import MODEL_ID
from bench.report import Row

PROMPTS = [
    "Write a long story about a dragon who learns to bake bread.",
    "Explain in detail how the tides work.",
    "Describe a busy harbour city at night.",
    "Write a long poem about the sea and its storms.",
    "Tell me everything about volcanoes.",
    "Write a long letter from a lighthouse keeper.",
    "Explain how birds fly, step by step.",
    "Describe the life of a honeybee.",
]
COUNTS = (1, 2, 4, 8)


async def stream(session: aiohttp.ClientSession, url: str, token: str, i: int, n: int) -> int:
    """One streamed generation; returns its output tokens."""
    body = {
        "model": MODEL_ID,
        "input": PROMPTS[i % len(PROMPTS)],
        "stream": True,
        "max_output_tokens": n,
        "temperature": 0,
    }
    tokens = 0
    async with session.post(
        f"{url}/v1/responses", json=body, headers={"Authorization": f"Bearer {token}"}
    ) as resp:
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            if raw.startswith(b"data: ") and b'"response.output_text.delta"' in raw:
                tokens += 1
    return tokens


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def aggregate(server: BenchServer, concurrent: int, max_tokens: int) -> tuple[float, int]:
    """Tokens/s over all streams, from the first request sent to the last stream's end."""
    figures = await aggregate_with_cpu(server, concurrent, max_tokens)
    return figures[0], figures[1]


async def aggregate_with_cpu(
    server: BenchServer, concurrent: int, max_tokens: int
) -> tuple[float, int, float]:
    """(tokens/s in all, tokens, the service's CPU use meanwhile in cores)."""
    assert server.proc is not None
    url = f"http://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1200)) as session:
        start, cpu = time.perf_counter(), cpu_seconds(server.proc.pid)
        counts = await asyncio.gather(
            *(stream(session, url, server.token, i, max_tokens) for i in range(concurrent))
        )
        took, cpu = time.perf_counter() - start, cpu_seconds(server.proc.pid) - cpu
    return sum(counts) / took, sum(counts), cpu / took


async def _measure(
    work: Path, max_tokens: int, repeats: int
) -> dict[int, tuple[float, int, float]]:
    best: dict[int, tuple[float, int, float]] = {}
    # The service as `serve` runs it (its default llama.cpp threads), with room for 8.
    with BenchServer(work / "b9", "--engine", "llama", "--demo", "--parallel", "8") as server:
        server.start()
        await aggregate(server, 1, 8)  # loads the model
        for _ in range(repeats):
            for n in COUNTS:  # interleaved, so slow phases of the machine hit all alike
                found = await aggregate_with_cpu(server, n, max_tokens)
                if found[0] > best.get(n, (0.0, 0, 0.0))[0]:
                    best[n] = found
    return best


def run(work: Path, quick: bool) -> list[Row]:
    max_tokens, repeats = (4, 1) if quick else (96, 2)
    best = asyncio.run(_measure(work, max_tokens, repeats))
    one = best[1][0]
    rows = [
        Row(
            "B9",
            "1 stream, tokens/s",
            one,
            "tok/s",
            note=f"best of {repeats}; {max_tokens} tokens per stream, greedy, prompt included; "
            f"service used {best[1][2]:.2f} cores",
        )
    ]
    for n in COUNTS[1:]:
        rate, tokens, cores = best[n]
        goal = "≥ 1.25×" if n == 4 else ""
        rows.append(
            Row(
                "B9",
                f"{n} concurrent streams, tokens/s in all",
                rate,
                "tok/s",
                goal,
                rate / one,
                "1 stream",
                (rate >= 1.25 * one) if n == 4 else None,
                note=f"{tokens} tokens; service used {cores:.2f} cores, "
                f"{rate / max(cores, 1e-9):.0f} tokens per CPU-second",
            )
        )
    return rows
