"""B11 conversation turns: time to first token of turn 5 of a conversation against turn 1,
the client resending the whole history each turn as chat front ends do (the prefix cache
evaluates only the new part)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import BenchServer
from bench.llm import MODEL_ID
from bench.report import Row

SYSTEM = (
    "You are a patient assistant for a small seaside town's visitor centre. Answer in two or "
    "three sentences, mention opening hours when relevant, and never invent prices. " * 3
)
QUESTIONS = [
    "Where can I see the lighthouse?",
    "Is the harbour museum open on Sundays?",
    "What is a good walk along the cliffs?",
    "Can I take a boat to the island?",
    "Where should we eat fish tonight?",
]


async def turn(
    session: aiohttp.ClientSession,
    url: str,
    token: str,
    messages: list[dict[str, Any]],
    reply_tokens: int,
) -> tuple[float, str]:
    """Stream one turn; returns (seconds to the first text delta, the reply)."""
    body = {
        "model": MODEL_ID,
        "input": messages,
        "stream": True,
        "max_output_tokens": reply_tokens,
        "temperature": 0,
    }
    start = time.perf_counter()
    first = 0.0
    text = ""
    async with session.post(
        f"{url}/v1/responses", json=body, headers={"Authorization": f"Bearer {token}"}
    ) as resp:
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            if not raw.startswith(b"data: "):
                continue
            event = json.loads(raw[6:])
            if event["type"] == "response.output_text.delta":
                first = first or time.perf_counter() - start
                text += event["delta"]
    return first, text


async def conversation(server: BenchServer, session_no: int, reply_tokens: int) -> list[float]:
    url = f"http://127.0.0.1:{server.port}"
    # Each conversation opens differently, so its turn 1 never finds an earlier one's cache.
    system = f"Session {session_no}. {SYSTEM}"
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    ttft: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        for question in QUESTIONS:
            messages.append({"role": "user", "content": question})
            first, reply = await turn(session, url, server.token, messages, reply_tokens)
            ttft.append(first)
            messages.append({"role": "assistant", "content": reply})
    return ttft


async def _measure(work: Path, repeats: int, reply_tokens: int) -> list[list[float]]:
    runs = []
    with BenchServer(work / "b11", "--engine", "llama", "--demo") as server:
        server.start()
        await conversation(server, 0, reply_tokens)  # loads the model
        for session_no in range(1, repeats + 1):
            runs.append(await conversation(server, session_no, reply_tokens))
    return runs


def run(work: Path, quick: bool) -> list[Row]:
    # (quick: replies of 8 tokens, not 48: the smoke only shows the bench runs; the turns'
    # decoding was most of its CPU)
    repeats, reply_tokens = (1, 8) if quick else (3, 48)
    runs = asyncio.run(_measure(work, repeats, reply_tokens))
    best = [min(r[i] for r in runs) for i in range(len(QUESTIONS))]
    return [
        Row("B11", "time to first token, turn 1", best[0] * 1000, "ms", note=f"best of {repeats}"),
        Row(
            "B11",
            "time to first token, turn 5 (history resent)",
            best[4] * 1000,
            "ms",
            "≤ 1.3×",
            best[4] / best[0],
            "turn 1",
            best[4] <= 1.3 * best[0],
            note="turns 2–4: " + ", ".join(f"{t * 1000:.0f} ms" for t in best[1:4]),
        ),
    ]
