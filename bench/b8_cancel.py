"""B8 cancel latency: cancel during a real generation (demo model through llama.cpp) until
the stream's client sees `cancelled` committed, in token times."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bench.common import BenchServer
from bench.llm import Stream, sse_generate
from bench.report import Row

CANCEL_AFTER = 6  # tokens streamed before the cancel


async def _one(server: BenchServer) -> tuple[float, float]:
    """(cancel → `cancelled` seen by the stream's client in ms, time per decoded token in ms)."""
    sent = [0.0]

    async def cancel_midway(stream: Stream) -> None:
        if len(stream.times) == CANCEL_AFTER:
            conn = server.connection()
            sent[0] = time.perf_counter()
            status, data = await conn.request("POST", f"/v1/responses/{stream.response_id}/cancel")
            await conn.close()
            if status != 200:
                raise RuntimeError(f"cancel answered {status}: {data[:300]!r}")

    stream = await sse_generate(server, 400, on_token=cancel_midway)
    if stream.end_type != "error" or not sent[0]:
        raise RuntimeError(f"the generation ended with {stream.end_type} before the cancel")
    return (stream.end_time - sent[0]) * 1000, stream.token_time() * 1000


def run(work: Path, quick: bool) -> list[Row]:
    repeats = 2 if quick else 8

    async def go() -> list[tuple[float, float]]:
        with BenchServer(work / "b8", "--engine", "llama", "--demo") as server:
            server.start()
            await sse_generate(server, 2)  # model loaded before the first measurement
            return [await _one(server) for _ in range(repeats)]

    results = asyncio.run(go())
    worst_ms, token_ms = max(results)
    token_ms = sorted(t for _, t in results)[len(results) // 2]
    in_tokens = worst_ms / token_ms
    return [
        Row("B8", "token time while streaming (median of the runs)", token_ms, "ms"),
        Row(
            "B8",
            f"cancel → cancelled seen by the client, worst of {repeats}",
            worst_ms,
            "ms",
            "≤ 1 token + 50 ms",
            None,
            "",
            worst_ms <= token_ms + 50,
            note=f"= {in_tokens:.2f} token times; median "
            f"{sorted(r[0] for r in results)[len(results) // 2]:.1f} ms",
        ),
        Row(
            "B8",
            "cancel latency in token times (worst)",
            in_tokens,
            "tokens",
            f"≤ {1 + 50 / token_ms:.2f}",
            None,
            "",
            worst_ms <= token_ms + 50,
        ),
    ]
