"""B19 Anthropic Messages stream: tokens/s of the same generation streamed as Anthropic's
`content_block_delta` events and as Open Responses events, from one service in the same run
(the Anthropic route renders its events from the same committed task events)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp

from bench.common import BenchServer
from bench.llm import MODEL_ID, PROMPT, Stream, against_responses
from bench.report import Row


async def messages_generate(server: BenchServer, max_tokens: int) -> Stream:
    """POST a streamed Anthropic message and record when each text delta arrives."""
    stream = Stream()
    body = {
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    headers = {"x-api-key": server.token, "anthropic-version": "2023-06-01"}
    url = f"http://127.0.0.1:{server.port}/v1/messages"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session,
        session.post(url, json=body, headers=headers) as resp,
    ):
        if resp.status != 200:
            raise RuntimeError(f"messages stream answered {resp.status}: {await resp.text()}")
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            now = time.perf_counter()
            event = json.loads(line[6:])
            if event["type"] == "message_start":
                stream.response_id = event["message"]["id"]
            elif event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
                stream.times.append(now)
                stream.text += event["delta"]["text"]
            elif event["type"] in ("message_stop", "error"):
                stream.end_type, stream.end_time = event["type"], now
                break
    return stream


def run(work: Path, quick: bool) -> list[Row]:
    max_tokens, repeats = (16, 1) if quick else (128, 6)
    anthropic, responses = asyncio.run(
        against_responses(work / "b19", messages_generate, max_tokens, repeats)
    )
    same = "same text" if anthropic.text == responses.text else "texts differ"
    return [
        Row(
            "B19",
            "Anthropic Messages stream vs Responses stream",
            anthropic.rate(),
            "tok/s",
            "≥ 0.97×",
            anthropic.rate() / responses.rate(),
            "Responses",
            anthropic.rate() >= 0.97 * responses.rate(),
            note=f"best of {repeats}; {len(anthropic.times)} deltas; {same} (greedy)",
        ),
    ]
