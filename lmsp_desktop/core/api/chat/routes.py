"""`POST /v1/chat/completions`: a chat completion is a task like any other (persisted with
its events before generation, shown in the app, cancellable, restarted by its policy,
idempotent), answered as a `chat.completion` or as `chat.completion.chunk` SSE lines.

Stored chat completions can be read back (`GET /v1/chat/completions/{id}`) and deleted, as
OpenAI's stored completions; their tasks are cancelled at `POST /v1/tasks/{id}/cancel`.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.answering import Answering, answer_created
from lmsp_desktop.core.api.chat import INTAKE
from lmsp_desktop.core.api.chat.render import ChunkRenderer, completion_object
from lmsp_desktop.core.api.chat.request import CHAT_API
from lmsp_desktop.core.api.resource import RowLike
from lmsp_desktop.core.api.responses.conversation import task_of
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import not_found
from lmsp_desktop.core.scopes import RESPONSES_READ, RESPONSES_WRITE
from lmsp_desktop.core.service.context import ServiceContext, requires

routes = web.RouteTableDef()


def _chunks(row: RowLike, request: dict[str, Any]) -> ChunkRenderer:
    include_usage = bool(request["stream_options"]["include_usage"])
    return ChunkRenderer(row["id"], row["created_at"], row["model"], include_usage)


ANSWERING = Answering(body=completion_object, stream=_chunks)


@routes.post("/v1/chat/completions")
@requires(RESPONSES_WRITE)
async def create_chat_completion(
    request: web.Request, ctx: ServiceContext, caller: Principal
) -> web.StreamResponse:
    """A `chat.completion`, or `data: {chat.completion.chunk}` lines then `[DONE]`."""
    return await answer_created(request, ctx, caller, INTAKE, ANSWERING)


async def _stored_chat(request: web.Request, ctx: ServiceContext, principal: Principal) -> Any:
    completion_id = request.match_info["id"]
    row = await ctx.store.tasks.get(completion_id, principal.owner_filter())
    settings = json.loads(row["request"])
    # The code of every other "no such id" answer (the store's own, for an unknown id).
    if settings.get("api") != CHAT_API:  # the caller's own task: it may be told what it is
        raise not_found(
            f"No chat completion with id {completion_id!r}: that id is the task of "
            f"{task_of(row)}, not a chat completion; GET /v1/tasks/{completion_id} shows it.",
            "response_not_found",
        )
    if not settings.get("store", True):
        raise not_found(
            f"No chat completion with id {completion_id!r}: it was made with `store: false`, "
            f"so it is not kept to be retrieved; GET /v1/tasks/{completion_id} shows its task.",
            "response_not_found",
        )
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
