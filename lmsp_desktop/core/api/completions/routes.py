"""`POST /v1/completions`: OpenAI's legacy completions, for editor autocomplete (a prompt
continued as it is; `suffix` for fill-in-the-middle). A task like any other; a request with
several prompts (or `n` > 1) a task per choice (choices.py)."""

from __future__ import annotations

from aiohttp import web

from lmsp_desktop.core.api.answering import Answering, answer_created
from lmsp_desktop.core.api.completions import INTAKE
from lmsp_desktop.core.api.completions.choices import answer_choices
from lmsp_desktop.core.api.completions.render import CompletionChunks, completion_object
from lmsp_desktop.core.api.completions.request import choice_bodies
from lmsp_desktop.core.api.creation import refuse_new_work
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.scopes import RESPONSES_WRITE
from lmsp_desktop.core.service.bodies import read_json
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.service.openapi import api_operation

routes = web.RouteTableDef()
ANSWERING = Answering(body=completion_object, stream=CompletionChunks)


@routes.post("/v1/completions")
@requires(RESPONSES_WRITE)
async def create_completion(
    request: web.Request, ctx: ServiceContext, caller: Principal
) -> web.StreamResponse:
    """A `text_completion`, or `data: {text_completion}` lines then `[DONE]`; one choice
    per prompt times `n`."""
    refuse_new_work(ctx)  # before the body is read, as every create
    body = await read_json(request)
    bodies = choice_bodies(body)
    if bodies is not None:
        return await answer_choices(request, ctx, caller, body, bodies)
    return await answer_created(request, ctx, caller, INTAKE, ANSWERING, body)


OPENAPI_PATHS = {
    "/v1/completions": {
        "post": api_operation(
            "Complete one prompt or several (a task per choice, like any other)",
            RESPONSES_WRITE,
            "text_completion (or its chunks as SSE lines)",
        )
    }
}
