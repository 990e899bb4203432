"""`/v1/responses`: create (background, stream, sync), retrieve, stream replay, cancel, delete."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.answering import (
    cancel_on_disconnect,
    cancel_quietly,
    create_from_request,
    finished_object,
    holding_key,
    settle_key,
    stream_events,
    wait_for_final,
)
from lmsp_desktop.core.api.failures import NO_RETRY, task_failure
from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.api.responses import INTAKE
from lmsp_desktop.core.api.responses.conversation import stored_response, task_of
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import invalid, not_found
from lmsp_desktop.core.scopes import RESPONSES_READ, RESPONSES_WRITE
from lmsp_desktop.core.service.bodies import query_flag, query_int
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.states import LMSP_ONLY_EVENTS, EventType, TaskState

routes = web.RouteTableDef()
# How long a cancel's answer waits for a running task to stop (LMSP_API.md, Cancel).
CANCEL_ANSWER_WAIT_S = 2.0


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
    created = await create_from_request(request, ctx, caller, INTAKE)
    result, task_id = created.result, created.task_id
    if created.replayed:
        return web.json_response(
            result.body, status=result.status, headers={"Idempotent-Replayed": "true"}
        )
    if created.mode == "background" and not created.request["stream"]:
        return web.Response(  # the JSON text the commit wrote into `response.created`
            text=result.body_json or json.dumps(result.body),
            status=202,
            content_type="application/json",
            headers={"Location": f"/v1/responses/{task_id}"},
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
            final = await wait_for_final(request, ctx, task_id)
            failure = task_failure(final, when_output=False)
            if failure is not None:  # failed before any output: an HTTP error, as OpenAI
                response = web.json_response(
                    failure.body(), status=failure.status, headers=NO_RETRY
                )
                await settle_key(ctx, created.claim, failure.body(), failure.status)
                return response
            response = web.json_response(final)
    if created.claim is not None:
        await settle_key(ctx, created.claim, await finished_object(ctx, task_id))
    return response


@routes.get("/v1/responses/{id}")
@requires(RESPONSES_READ)
async def retrieve_response(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.StreamResponse:
    task_id = request.match_info["id"]
    # A `store: false` response is not kept for retrieval (its task still is, for the app).
    row = await stored_response(ctx.store.tasks, task_id, principal.owner_filter())
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
    task_id = request.match_info["id"]
    await _a_response(ctx, task_id, principal)
    row = await ctx.store.tasks.cancel(task_id, principal.owner_filter())
    if row["state"] == TaskState.CANCELLING:
        # The engine stops within a token: answer with the cancelled response, as OpenAI's
        # cancel does (the SDK's `cancel(...).status` is "cancelled" there), unless it takes
        # longer (a model load in progress ends first): then the response as it is now.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ctx.follower.wait_finished(task_id), CANCEL_ANSWER_WAIT_S)
        row = await ctx.store.tasks.get(task_id, principal.owner_filter())
    return web.json_response(build_response(row))


@routes.delete("/v1/responses/{id}")
@requires(RESPONSES_WRITE)
async def delete_response(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    task_id = request.match_info["id"]
    await _a_response(ctx, task_id, principal)
    await ctx.store.tasks.delete(task_id, principal.owner_filter())
    return web.json_response({"id": task_id, "object": "response", "deleted": True})


async def _a_response(ctx: ServiceContext, task_id: str, principal: Principal) -> None:
    """The Responses routes know responses only: a chat completion's id answers 404 here
    (as at OpenAI); its task is cancelled at POST /v1/tasks/{id}/cancel."""
    row = await ctx.store.tasks.get(task_id, principal.owner_filter())
    if json.loads(row["request"]).get("api", "responses") != "responses":
        # The caller's own task: it may be told what the id is.
        raise not_found(
            f"No response with id {task_id!r}: that id is the task of {task_of(row)}, not a "
            f"response. POST /v1/tasks/{task_id}/cancel cancels it; GET /v1/tasks/{task_id} "
            "shows it.",
            "response_not_found",
        )


@routes.get("/v1/responses/{id}/input_items")
@requires(RESPONSES_READ)
async def list_input_items(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    """A stored response's input items, paged by item id (`after`), `order` asc or desc
    (desc by default, as OpenAI)."""
    row = await stored_response(ctx.store.tasks, request.match_info["id"], principal.owner_filter())
    items = [_listed(item) for item in json.loads(row["request"]).get("input_items") or []]
    order = request.query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("`order` must be asc or desc.", "order")
    if order == "desc":
        items.reverse()
    after = request.query.get("after")
    if after:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise not_found(
                f"No input item {after!r} in this response to page after.",
                "item_not_found",
                "after",
            )
        items = items[ids.index(after) + 1 :]
    limit = query_int(request, "limit", 20, 1, 100)
    page = items[:limit]
    return web.json_response(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


def _listed(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "status": "completed"} if item["type"] == "message" else item
