"""`/v1/responses`: create (background, stream, sync), retrieve, stream replay, cancel, delete."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.creation import IdempotencyInput, create_task
from lmsp_desktop.core.responses import build_response
from lmsp_desktop.core.scopes import RESPONSES_READ, RESPONSES_WRITE
from lmsp_desktop.core.service.answering import (
    cancel_on_disconnect,
    cancel_quietly,
    finished_object,
    holding_key,
    settle_key,
    stream_events,
    wait_for_final,
)
from lmsp_desktop.core.service.bodies import query_flag, query_int, read_json
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.states import LMSP_ONLY_EVENTS, EventType

routes = web.RouteTableDef()


def responses_view(event: dict[str, Any]) -> dict[str, Any] | None:
    """An event as the Responses routes stream it: Open Responses types only; a cancel ends
    the stream with the standard `error` event (code `cancelled`)."""
    if event["type"] == EventType.CANCELLED:
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


@routes.post("/v1/responses")
@requires(RESPONSES_WRITE)
async def create_response(
    request: web.Request, ctx: ServiceContext, caller: Principal
) -> web.StreamResponse:
    key = request.headers.get("Idempotency-Key")
    created = await create_task(
        ctx,
        lambda: read_json(request),
        client_id=caller.client_id,
        idempotency=IdempotencyInput(key, "POST", request.path) if key is not None else None,
    )
    result, task_id = created.result, created.task_id
    if created.replayed:
        return web.json_response(
            result.body, status=result.status, headers={"Idempotent-Replayed": "true"}
        )
    if created.mode == "background" and not created.request["stream"]:
        return web.json_response(
            result.body, status=202, headers={"Location": f"/v1/responses/{task_id}"}
        )
    if created.mode == "background":  # background and stream: the key already holds the 202
        response, _ = await stream_events(request, ctx, task_id, 0, responses_view)
        return response
    async with holding_key(ctx, created.claim):
        if created.mode == "stream":
            async with cancel_on_disconnect(request, ctx, task_id):
                response, gone = await stream_events(request, ctx, task_id, 0, responses_view)
            if gone:  # a stream's client that goes away cancels its task (LMSP_API.md)
                await cancel_quietly(ctx, task_id, "its stream's client went away")
        else:
            response = web.json_response(await wait_for_final(request, ctx, task_id))
    if created.claim is not None:
        await settle_key(ctx, created.claim, await finished_object(ctx, task_id))
    return response


@routes.get("/v1/responses/{id}")
@requires(RESPONSES_READ)
async def retrieve_response(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.StreamResponse:
    task_id = request.match_info["id"]
    row = await ctx.store.tasks.get(task_id, principal.owner_filter())
    if query_flag(request, "stream"):
        after = query_int(request, "starting_after", 0, 0, 2**62)
        response, _ = await stream_events(request, ctx, task_id, after, responses_view)
        return response
    return web.json_response(build_response(row, await ctx.store.tasks.queue_position(row)))


@routes.post("/v1/responses/{id}/cancel")
@requires(RESPONSES_WRITE)
async def cancel_response(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    row = await ctx.store.tasks.cancel(request.match_info["id"], principal.owner_filter())
    return web.json_response(build_response(row))


@routes.delete("/v1/responses/{id}")
@requires(RESPONSES_WRITE)
async def delete_response(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    task_id = request.match_info["id"]
    await ctx.store.tasks.delete(task_id, principal.owner_filter())
    return web.json_response({"id": task_id, "object": "response", "deleted": True})
