"""A scripted OpenAI-compatible upstream on loopback (aiohttp), for fault tests: each
/v1/chat/completions request takes the next behaviour from a list."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.stopping import stopping_event


@dataclass
class Behaviour:
    """`ok` streams `words` to the end; `cut` streams `words` then drops the connection;
    `error` answers `status` with an OpenAI error body; `silent` never answers."""

    kind: str = "ok"
    words: list[str] = field(default_factory=lambda: ["Hello", " there", "!"])
    status: int = 500
    message: str = "the GPU is on fire"
    delay_s: float = 0.0  # between chunks
    stall: bool = False  # after the words, send nothing more and keep the connection open
    # (Responses, as another LMSP) after the words, end as a stopping LMSP service does: its
    # standard `error` event, code shutting_down.
    stopping: bool = False
    # Report usage at the end, with this many cached prompt tokens (None: no usage at all
    # from Chat Completions, usage without details from Responses).
    cached_tokens: int | None = None


class FakeUpstream:
    def __init__(
        self, script: list[Behaviour], models: tuple[str, ...] = ("m1",), lmsp: bool = False
    ) -> None:
        self.script = list(script)
        self.lmsp = lmsp  # answer like another LMSP service: /v1/health, Responses, cancel
        self.cancelled: list[str] = []
        self.models = models
        self.requests: list[dict[str, Any]] = []
        self.disconnects = 0
        self.auth: list[str | None] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        if self.lmsp:
            app.router.add_get("/v1/health", self._health)
            app.router.add_post("/v1/responses", self._responses)
            app.router.add_post("/v1/responses/{id}/cancel", self._cancel)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self.url

    async def stop(self) -> None:
        if self.runner is None:
            return
        # Every connection the server holds, whether a request came on it yet or not (one
        # accepted while this loop was starved may not have reached a handler).
        server = self.runner.server
        transports = [c.transport for c in server.connections] if server is not None else []
        await self.runner.cleanup()
        if server is not None:  # and any made while the cleanup ran
            transports += [c.transport for c in server.connections]
        # A connection whose client gave up while this loop was starved (a loaded machine), or
        # whose client stopped reading, may still be open after the cleanup (its close waits
        # for the buffer to be sent): aborted here, and its connection_lost, which closes the
        # socket, run before the caller stops the loop, or the socket leaks (a ResourceWarning
        # failing some later test: test_upstream_never_answering beside a CPU hog).
        for transport in transports:
            if transport is not None:
                transport.abort()
        for _ in range(3):
            await asyncio.sleep(0)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        self.auth.append(request.headers.get("Authorization"))
        step = self.script.pop(0) if self.script else Behaviour()
        if step.kind == "error":
            return web.json_response({"error": {"message": step.message}}, status=step.status)
        if step.kind == "silent":  # until the client gives up (aiohttp keeps the handler)
            while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            self.disconnects += 1
            return web.Response(status=504)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for word in step.words:
                chunk = {"choices": [{"index": 0, "delta": {"content": word}}]}
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
                if step.delay_s:
                    await asyncio.sleep(step.delay_s)
            if step.stall:  # aiohttp does not cancel handlers: watch the connection
                while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
                self.disconnects += 1
                return response
            if step.kind == "cut":
                assert request.transport is not None
                request.transport.close()
                return response
            end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            await response.write(f"data: {json.dumps(end)}\n\n".encode())
            if step.cached_tokens is not None:  # OpenAI's include_usage chunk
                usage = {
                    "prompt_tokens": 9,
                    "completion_tokens": len(step.words),
                    "prompt_tokens_details": {"cached_tokens": step.cached_tokens},
                }
                chunk = {"choices": [], "usage": usage}
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            raise
        return response

    # -- another LMSP ------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service_id": "svc_fake"})

    async def _cancel(self, request: web.Request) -> web.Response:
        self.cancelled.append(request.match_info["id"])
        return web.json_response({"id": request.match_info["id"], "status": "cancelled"})

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        step = self.script.pop(0) if self.script else Behaviour()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(event: dict[str, Any]) -> None:
            await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())

        await send({"type": "response.created", "response": {"id": "resp_remote1"}})
        for word in step.words:
            await send({"type": "response.output_text.delta", "delta": word})
        if step.stall:
            while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            self.disconnects += 1
            return response
        if step.stopping:
            await send(stopping_event("resp_remote1", "fail", len(step.words) + 1))
            return response
        usage: dict[str, Any] = {"input_tokens": 7, "output_tokens": len(step.words)}
        if step.cached_tokens is not None:
            usage["input_tokens_details"] = {"cached_tokens": step.cached_tokens}
        await send({"type": "response.completed", "response": {"usage": usage}})
        return response
