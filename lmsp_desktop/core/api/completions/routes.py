"""`POST /v1/completions`: OpenAI's legacy completions, for editor autocomplete (a prompt
continued as it is; `suffix` for fill-in-the-middle). A task like any other."""

from __future__ import annotations

from aiohttp import web

from lmsp_desktop.core.api.answering import Answering, answer_created
from lmsp_desktop.core.api.completions import INTAKE
from lmsp_desktop.core.api.completions.render import CompletionChunks, completion_object
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.scopes import RESPONSES_WRITE
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.service.openapi import api_operation

routes = web.RouteTableDef()
ANSWERING = Answering(body=completion_object, stream=CompletionChunks)


@routes.post("/v1/completions")
@requires(RESPONSES_WRITE)
async def create_completion(
    request: web.Request, ctx: ServiceContext, caller: Principal
) -> web.StreamResponse:
    """A `text_completion`, or `data: {text_completion}` lines then `[DONE]`."""
    return await answer_created(request, ctx, caller, INTAKE, ANSWERING)


OPENAPI_PATHS = {
    "/v1/completions": {
        "post": api_operation(
            "Create a completion of a prompt (a task like any other)",
            RESPONSES_WRITE,
            "text_completion (or its chunks as SSE lines)",
        )
    }
}
