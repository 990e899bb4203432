"""`python -m bench.paced_upstream PORT TOKENS EVERY_S`: an OpenAI-compatible upstream that
streams TOKENS words, one every EVERY_S seconds (B13's fixed-pace reference)."""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web


def app(tokens: int, every_s: float) -> web.Application:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m1", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        count = min(tokens, int(body.get("max_tokens") or tokens))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(count):
            # On a schedule rather than sleeping a fixed gap: lateness does not add up.
            await asyncio.sleep(max(0.0, start + (i + 1) * every_s - loop.time()))
            chunk = {"choices": [{"index": 0, "delta": {"content": f" w{i}"}}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
        await response.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        return response

    application = web.Application()
    application.router.add_get("/v1/models", models)
    application.router.add_post("/v1/chat/completions", chat)
    return application


if __name__ == "__main__":
    port, count, every = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    web.run_app(app(count, every), host="127.0.0.1", port=port, print=None)
