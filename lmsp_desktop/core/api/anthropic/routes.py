"""`POST /v1/messages` and `POST /v1/messages/count_tokens`, as Anthropic's API (Claude
Code posts to `/v1/messages?beta=true`: the query is ignored). Every error, a refused token
included, has Anthropic's shape."""

from __future__ import annotations

from aiohttp import web

from lmsp_desktop.core.api.answering import Answering, answer_created
from lmsp_desktop.core.api.anthropic import INTAKE
from lmsp_desktop.core.api.anthropic.render import MessageStream, anthropic_error, message_object
from lmsp_desktop.core.api.anthropic.request import parse_common
from lmsp_desktop.core.api.creation import refuse_new_work
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.info import CHANGED, INVALID, MISSING
from lmsp_desktop.core.models.messages import not_runnable
from lmsp_desktop.core.scopes import MODELS_READ, RESPONSES_WRITE
from lmsp_desktop.core.service.bodies import read_json
from lmsp_desktop.core.service.context import ErrorBody, ServiceContext, errors_shaped, requires
from lmsp_desktop.core.service.openapi import api_operation

routes = web.RouteTableDef()
ANSWERING = Answering(body=message_object, stream=MessageStream, error=anthropic_error)


@routes.post("/v1/messages")
@errors_shaped(anthropic_error)
@requires(RESPONSES_WRITE)
async def create_message(
    request: web.Request, ctx: ServiceContext, caller: Principal
) -> web.StreamResponse:
    """A `message`, or its stream of events (`stream: true`)."""
    return await answer_created(request, ctx, caller, INTAKE, ANSWERING)


@routes.post("/v1/messages/count_tokens")
@errors_shaped(anthropic_error)
@requires(MODELS_READ)
async def count_tokens(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    """`{"input_tokens": n}`: the prompt counted with the model's own tokenizer and chat
    template, tools and system included, as a message would be run."""
    refuse_new_work(ctx)
    body = await read_json(request)
    parsed = parse_common(body, ctx.settings.default_on_restart)
    info = await ctx.registry.get(parsed["model"])
    if info.state in (CHANGED, MISSING):  # as a message's create: the launch scan's word
        await ctx.registry.gate.wait_recorded()
        info = await ctx.registry.get(info.id)
    if info.state in (INVALID, CHANGED, MISSING):  # what a message on it answers, not 'count'
        raise not_runnable(info)
    counted = None
    if ctx.tokens is not None and getattr(info, "source", "upstream") != "upstream":
        counted = await ctx.tokens.count(info, parsed)
    if counted is None:
        raise LmspError(
            f"Tokens of {info.id} cannot be counted here (no local model file to read its "
            "tokenizer from).",
            code="count_unavailable",
            param="model",
        )
    return web.json_response({"input_tokens": counted})


ERROR_SCHEMA = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}
OPENAPI_PATHS = {
    "/v1/messages": {
        "post": api_operation(
            "Create an Anthropic message (a task like any other)",
            RESPONSES_WRITE,
            "message (or its stream of events)",
            ERROR_SCHEMA,
        )
    },
    "/v1/messages/count_tokens": {
        "post": api_operation(
            "Count a message's input tokens", MODELS_READ, "{input_tokens}", ERROR_SCHEMA, False
        )
    },
}


def _unmatched(request: web.Request) -> ErrorBody:
    return anthropic_error


# Under /v1/messages a method or path no route has (`GET /v1/messages`, the Message Batches
# API's `/v1/messages/batches`) answers in Anthropic's shape too: its clients parse that one.
UNMATCHED_ERRORS = {"/v1/messages": _unmatched}
