"""B14 Chat Completions stream: tokens/s of the same generation streamed as
`chat.completion.chunk` lines and as Open Responses events, from one service in the same run
(the chat route renders its chunks from the same committed events)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp

from bench.common import BenchServer
from bench.llm import MODEL_ID, PROMPT, Stream, against_responses
from bench.report import Row


async def chat_generate(server: BenchServer, max_tokens: int) -> Stream:
    """POST a streamed chat completion and record when each content chunk arrives."""
    stream = Stream()
    body = {
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    headers = {"Authorization": f"Bearer {server.token}"}
    url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session,
        session.post(url, json=body, headers=headers) as resp,
    ):
        if resp.status != 200:
            raise RuntimeError(f"chat stream answered {resp.status}: {await resp.text()}")
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            now = time.perf_counter()
            if line == "data: [DONE]":
                stream.end_type, stream.end_time = "done", now
                break
            chunk = json.loads(line[6:])
            stream.response_id = chunk["id"]
            choice = chunk["choices"][0] if chunk["choices"] else {}
            content = choice.get("delta", {}).get("content")
            if content:
                stream.times.append(now)
                stream.text += content
    return stream


def run(work: Path, quick: bool) -> list[Row]:
    max_tokens, repeats = (16, 1) if quick else (128, 6)
    chat, responses = asyncio.run(
        against_responses(work / "b14", chat_generate, max_tokens, repeats)
    )
    same = "same text" if chat.text == responses.text else "texts differ"
    return [
        Row(
            "B14",
            "Responses SSE stream",
            responses.rate(),
            "tok/s",
            note=f"best of {repeats}; {len(responses.times)} tokens; decode rate",
        ),
        Row(
            "B14",
            "Chat Completions stream vs Responses stream",
            chat.rate(),
            "tok/s",
            "≥ 0.97×",
            chat.rate() / responses.rate(),
            "Responses",
            chat.rate() >= 0.97 * responses.rate(),
            note=f"best of {repeats}; {len(chat.times)} chunks; {same} (greedy)",
        ),
    ]
