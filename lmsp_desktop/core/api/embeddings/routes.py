"""`POST /v1/embeddings`: OpenAI's Embeddings API. Each call is a task of kind `embedding`
(listed, cancelled if the client goes away, run in its turn in the model's queue)."""

from __future__ import annotations

from aiohttp import web

from lmsp_desktop.core.api.embeddings.creation import answer_embedding
from lmsp_desktop.core.api.embeddings.render import embedding_list
from lmsp_desktop.core.api.embeddings.request import parse_embeddings
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.scopes import RESPONSES_WRITE
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.service.openapi import api_operation

routes = web.RouteTableDef()


@routes.post("/v1/embeddings")
@requires(RESPONSES_WRITE)
async def create_embeddings(
    request: web.Request, ctx: ServiceContext, caller: Principal
) -> web.Response:
    """`{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], ...}`;
    idempotent under an Idempotency-Key, as every POST."""
    return await answer_embedding(request, ctx, caller.client_id, parse_embeddings, embedding_list)


OPENAPI_PATHS = {
    "/v1/embeddings": {
        "post": api_operation(
            "Create embeddings (a task of kind embedding)",
            RESPONSES_WRITE,
            "list of embedding objects",
        )
    }
}
