"""`POST /v1/chat/completions`: a chat completion is a task like any other (persisted with
its events before generation, shown in the app, cancellable, restarted by its policy,
idempotent), answered as a `chat.completion` or as `chat.completion.chunk` SSE lines.

Stored chat completions can be read back (`GET /v1/chat/completions/{id}`) and deleted, as
OpenAI's stored completions; their tasks are cancelled at `POST /v1/tasks/{id}/cancel`.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.answering import (
    cancel_on_disconnect,
    cancel_quietly,
    create_from_request,
    holding_key,
    settle_key,
)
from lmsp_desktop.core.api.chat import INTAKE
from lmsp_desktop.core.api.chat.render import ChunkRenderer, completion_object
from lmsp_desktop.core.api.chat.request import CHAT_API
from lmsp_desktop.core.api.failures import NO_RETRY, task_failure
from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import ShuttingDownError, not_found
from lmsp_desktop.core.scopes import RESPONSES_READ, RESPONSES_WRITE
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.states import TERMINAL, TaskState

routes = web.RouteTableDef()


@routes.post("/v1/chat/completions")
@requires(RESPONSES_WRITE)
async def create_chat_completion(
    request: web.Request, ctx: ServiceContext, caller: Principal
) -> web.StreamResponse:
    created = await create_from_request(request, ctx, caller, INTAKE)
    if created.replayed:
        result = created.result
        return web.json_response(
            result.body, status=result.status, headers={"Idempotent-Replayed": "true"}
        )
    task_id = created.task_id
    async with holding_key(ctx, created.claim):
        if created.mode == "stream":
            usage = bool(created.request["stream_options"]["include_usage"])
            response: web.StreamResponse = await stream_chunks(request, ctx, task_id, usage)
        else:
            async with cancel_on_disconnect(request, ctx, task_id):
                await ctx.follower.wait_finished(task_id)
            response = await final_answer(ctx, task_id)
    if created.claim is not None:
        body, status = await settled_answer(ctx, task_id)
        await settle_key(ctx, created.claim, body, status)
    return response


async def settled_answer(ctx: ServiceContext, task_id: str) -> tuple[dict[str, Any] | None, int]:
    """What an idempotent retry gets: the completion, the error of a failed task, or None
    (nothing final: the key is released)."""
    row = await ctx.store.tasks.get(task_id)
    if TaskState(row["state"]) not in TERMINAL:
        return None, 200
    failure = task_failure(build_response(row), when_output=True)
    if failure is not None:
        return failure.body(), failure.status
    return completion_object(row), 200


async def final_answer(ctx: ServiceContext, task_id: str) -> web.Response:
    body, status = await settled_answer(ctx, task_id)
    if body is None:
        # Stopped waiting because the service is shutting down: the task is left for
        # recovery; a half-done 200 would look like a final answer.
        raise ShuttingDownError()
    return web.json_response(body, status=status, headers=NO_RETRY if status != 200 else None)


async def stream_chunks(
    request: web.Request, ctx: ServiceContext, task_id: str, include_usage: bool
) -> web.StreamResponse:
    """`data: {chat.completion.chunk}` lines as the task's events commit, then `[DONE]`.
    A client that goes away cancels the task (its partial output is kept)."""
    row = await ctx.store.tasks.get(task_id)
    chunks = ChunkRenderer(task_id, row["created_at"], row["model"], include_usage)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    gone = False
    try:
        async with cancel_on_disconnect(request, ctx, task_id):
            await response.write(chunks.opening())
            async with contextlib.aclosing(ctx.follower.follow_batches(task_id, 0)) as batches:
                async for batch in batches:
                    # The events committed together go in one write (each chunk whole).
                    data = b""
                    for event in batch:
                        data += chunks.render(event)
                        if chunks.finished:
                            break
                    if data:
                        await response.write(data)
                    if chunks.finished:
                        break
    except (ConnectionResetError, RuntimeError):
        gone = True
    if gone:  # a stream's client that goes away cancels its task (LMSP_API.md)
        await cancel_quietly(ctx, task_id, "its stream's client went away")
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response


async def _stored_chat(request: web.Request, ctx: ServiceContext, principal: Principal) -> Any:
    completion_id = request.match_info["id"]
    row = await ctx.store.tasks.get(completion_id, principal.owner_filter())
    settings = json.loads(row["request"])
    if settings.get("api") != CHAT_API or not settings.get("store", True):
        raise not_found(f"No chat completion with id {completion_id!r}.", "not_found")
    return row


@routes.get("/v1/chat/completions/{id}")
@requires(RESPONSES_READ)
async def retrieve_chat_completion(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    """A stored chat completion (as OpenAI's stored completions); `store: false` ones 404."""
    return web.json_response(completion_object(await _stored_chat(request, ctx, principal)))


@routes.delete("/v1/chat/completions/{id}")
@requires(RESPONSES_WRITE)
async def delete_chat_completion(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    row = await _stored_chat(request, ctx, principal)
    await ctx.store.tasks.delete(row["id"], principal.owner_filter())
    return web.json_response(
        {"id": row["id"], "object": "chat.completion.deleted", "deleted": True}
    )
