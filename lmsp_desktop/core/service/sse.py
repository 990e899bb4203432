"""Server-sent events: one event per write, `id`, `event`, one `data` line, LF only."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    return response


def encode(event: dict[str, Any]) -> bytes:
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event['sequence_number']}\nevent: {event['type']}\ndata: {data}\n\n".encode()


async def send(response: web.StreamResponse, event: dict[str, Any]) -> None:
    await response.write(encode(event))
