"""`/v1/models`: the models the service knows, with digests and their loaded state."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.service.bodies import list_body
from lmsp_desktop.core.service.context import CONTEXT, PRINCIPAL, ServiceContext

routes = web.RouteTableDef()


def _model_api(ctx: ServiceContext, info: Any) -> dict[str, Any]:
    return info.as_api(ctx.runner.loaded_state(info.id) if ctx.runner else "unloaded")  # type: ignore[no-any-return]


@routes.get("/v1/models")
async def list_models(request: web.Request) -> web.Response:
    principal: Principal = request[PRINCIPAL]
    principal.require("models:read")
    ctx = request.app[CONTEXT]
    models = [_model_api(ctx, info) for info in await ctx.registry.list()]
    return web.json_response(list_body(models, False))


@routes.get("/v1/models/{id:.+}")  # upstream models have a slash: gpu/llama-3-70b
async def get_model(request: web.Request) -> web.Response:
    principal: Principal = request[PRINCIPAL]
    principal.require("models:read")
    ctx = request.app[CONTEXT]
    return web.json_response(_model_api(ctx, await ctx.registry.get(request.match_info["id"])))
