"""`/v1/responses`: create (background, stream, sync), retrieve, stream replay, cancel, delete."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import LmspError, PausedError, ShuttingDownError
from lmsp_desktop.core.follow import EventFollower
from lmsp_desktop.core.requests import parse_create
from lmsp_desktop.core.responses import build_response
from lmsp_desktop.core.service import sse
from lmsp_desktop.core.service.bodies import query_flag, query_int, read_json
from lmsp_desktop.core.service.context import CONTEXT, PRINCIPAL, ServiceContext
from lmsp_desktop.core.states import LMSP_ONLY_EVENTS, TERMINAL, TaskState
from lmsp_desktop.core.storage.idempotency import (
    IdempotencyClaim,
    complete_key,
    release_key,
    request_digest,
    validate_key,
)
from lmsp_desktop.core.storage.tasks import NewTask

routes = web.RouteTableDef()
OWNER_KEYSPACE = "owner"


def _caller(request: web.Request, scope: str) -> tuple[ServiceContext, Principal]:
    principal: Principal = request[PRINCIPAL]
    principal.require(scope)
    return request.app[CONTEXT], principal


def responses_view(event: dict[str, Any]) -> dict[str, Any] | None:
    """An event as the Responses routes stream it: Open Responses types only; a cancel ends
    the stream with the standard `error` event (code `cancelled`)."""
    if event["type"] == "response.cancelled":
        return {
            "type": "error",
            "sequence_number": event["sequence_number"],
            "error": {
                "type": "cancelled",
                "code": "cancelled",
                "message": "The response was cancelled before it finished.",
                "param": None,
            },
        }
    if event["type"] in LMSP_ONLY_EVENTS:
        return None
    return event


@contextlib.asynccontextmanager
async def cancel_on_disconnect(
    request: web.Request, ctx: ServiceContext, task_id: str
) -> AsyncIterator[None]:
    """Cancel the task if the client goes away (its CPU is freed, its partial output kept)."""

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.25)
            transport = request.transport
            if transport is None or transport.is_closing():
                with contextlib.suppress(Exception):
                    await ctx.store.tasks.cancel(task_id)
                return

    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        watcher.cancel()


async def stream_events(
    request: web.Request, ctx: ServiceContext, task_id: str, after: int
) -> tuple[web.StreamResponse, bool]:
    """Replay the task's events after `after`, then follow them until the task ends.

    Returns the response and whether the client went away before the end.
    """
    response = await sse.open_stream(request)
    gone = False
    async with contextlib.aclosing(follower_of(ctx).follow(task_id, after)) as events:
        async for event in events:
            shown = responses_view(event)
            if shown is None:
                continue
            try:
                await sse.send(response, shown)
            except (ConnectionResetError, RuntimeError):
                gone = True
                break
            if shown["type"] == "error":
                break
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response, gone


async def _finished_object(ctx: ServiceContext, task_id: str) -> dict[str, Any] | None:
    """The response object if its task has finished, else None (the service is stopping)."""
    final = await ctx.store.tasks.response_object(task_id)
    return final if TaskState(final["task"]["state"]) in TERMINAL else None


@routes.post("/v1/responses")
async def create_response(request: web.Request) -> web.StreamResponse:
    ctx, principal = _caller(request, "responses:write")
    if ctx.paused:
        raise PausedError()
    body = await read_json(request)
    settings = parse_create(body, ctx.settings.default_on_restart)
    await ctx.registry.get(settings["model"])  # 404 model_not_found before anything is stored
    mode = "background" if settings["background"] else "stream" if settings["stream"] else "sync"
    claim = None
    if "Idempotency-Key" in request.headers:
        claim = IdempotencyClaim(
            principal.client_id or OWNER_KEYSPACE,
            validate_key(request.headers["Idempotency-Key"]),
            request_digest("POST", request.path, body),
            ctx.settings.idempotency_ttl_s,
        )
    result = await ctx.store.tasks.create(
        NewTask(
            model=settings["model"],
            request=settings,
            on_restart=settings["on_restart"],
            mode=mode,
            client_id=principal.client_id,
        ),
        claim,
    )
    if result.replayed:
        return web.json_response(
            result.body, status=result.status, headers={"Idempotent-Replayed": "true"}
        )
    task_id = result.task_id
    if mode == "background" and not settings["stream"]:
        return web.json_response(
            result.body, status=202, headers={"Location": f"/v1/responses/{task_id}"}
        )
    if mode == "background":  # background and stream: the key already holds the 202
        response, _ = await stream_events(request, ctx, task_id, 0)
        return response
    try:
        if settings["stream"]:
            async with cancel_on_disconnect(request, ctx, task_id):
                response, gone = await stream_events(request, ctx, task_id, 0)
            if gone:
                # A stream's client that goes away cancels its task (LMSP_API.md).
                with contextlib.suppress(LmspError):
                    await ctx.store.tasks.cancel(task_id)
        else:
            async with cancel_on_disconnect(request, ctx, task_id):
                await follower_of(ctx).wait_finished(task_id)
            final = await _finished_object(ctx, task_id)
            if final is None:
                # Stopped waiting because the service is shutting down: the task is left
                # for recovery; a half-done 200 would look like a final answer.
                raise ShuttingDownError()
            response = web.json_response(final)
    except BaseException:
        if claim is not None:
            await release_key(ctx.store.db, claim)
        raise
    if claim is not None:
        final = await _finished_object(ctx, task_id)
        if final is not None:
            await complete_key(ctx.store.db, claim, 200, final)
        else:  # nothing final to replay (client gone or shutdown): free the key
            await release_key(ctx.store.db, claim)
    return response


def follower_of(ctx: ServiceContext) -> EventFollower:
    follower: EventFollower = ctx.extras["follower"]
    return follower


@routes.get("/v1/responses/{id}")
async def retrieve_response(request: web.Request) -> web.StreamResponse:
    ctx, principal = _caller(request, "responses:read")
    task_id = request.match_info["id"]
    row = await ctx.store.tasks.get(task_id, principal.owner_filter())
    if query_flag(request, "stream"):
        after = query_int(request, "starting_after", 0, 0, 2**62)
        response, _ = await stream_events(request, ctx, task_id, after)
        return response
    return web.json_response(build_response(row, await ctx.store.tasks.queue_position(row)))


@routes.post("/v1/responses/{id}/cancel")
async def cancel_response(request: web.Request) -> web.Response:
    ctx, principal = _caller(request, "responses:write")
    row = await ctx.store.tasks.cancel(request.match_info["id"], principal.owner_filter())
    return web.json_response(build_response(row))


@routes.delete("/v1/responses/{id}")
async def delete_response(request: web.Request) -> web.Response:
    ctx, principal = _caller(request, "responses:write")
    task_id = request.match_info["id"]
    await ctx.store.tasks.delete(task_id, principal.owner_filter())
    return web.json_response({"id": task_id, "object": "response", "deleted": True})
