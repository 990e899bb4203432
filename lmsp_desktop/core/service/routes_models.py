"""`/v1/models`: the models the service knows, with digests and their loaded state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.context_window import effective_context
from lmsp_desktop.core.models.info import ModelInfo
from lmsp_desktop.core.scopes import MODELS_READ
from lmsp_desktop.core.service.bodies import list_body
from lmsp_desktop.core.service.context import ServiceContext, requires

routes = web.RouteTableDef()


def anthropic_fields(item: dict[str, Any], name: str | None) -> dict[str, Any]:
    """What the anthropic SDK's `models.list()` and `models.retrieve()` read (`type`,
    `display_name`, `created_at` in RFC 3339) beside OpenAI's fields: the same route
    answers both SDKs (their base URLs meet at /v1/models)."""
    created = datetime.fromtimestamp(item["created"], UTC).isoformat().replace("+00:00", "Z")
    return {"type": "model", "display_name": name or item["id"], "created_at": created}


async def _model_api(ctx: ServiceContext, info: ModelInfo) -> dict[str, Any]:
    item = info.as_api(ctx.runner.loaded_state(info.id) if ctx.runner else "unloaded")
    item.update(anthropic_fields(item, getattr(info, "name", None)))
    if item["state"] == "invalid":
        item["context_length"] = None
    if item.get("owned_by") == "local" and item["state"] != "invalid":
        # The length a local model really runs with: trained, capped by the settings, and
        # (with a fitter) by the memory plan, which also gives the memory estimate (an
        # invalid file runs with none: its header's value, if any, is not shown as one).
        item["context_length"] = effective_context(info.context_length, ctx.settings.max_context)
        item["trained_context_length"] = info.context_length
        item["memory_estimate"] = None
        if ctx.fitter is not None:
            item.update(ctx.fitter.api_fields(info, await ctx.fitter.current(info)))
    if ctx.runner is not None:
        pid = ctx.runner.engine_pid(info.id)
        if pid is not None:
            item["engine_pid"] = pid  # the worker process running it (docs/engine.md)
        crash = ctx.runner.last_crash(info.id)
        if crash is not None:
            item["engine_crash"] = crash.as_api()
    return item


@routes.get("/v1/models")
@requires(MODELS_READ)
async def list_models(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    models = [await _model_api(ctx, info) for info in await ctx.registry.list_models()]
    body = list_body(models, False)
    # Anthropic's list page names its first and last ids (null when empty).
    body["first_id"] = models[0]["id"] if models else None
    body["last_id"] = models[-1]["id"] if models else None
    return web.json_response(body)


# Upstream and store models have a slash (gpu/llama-3-70b, org/repo:q4_k_m). Not `pull`,
# which is POST /v1/models/pull's: GET or OPTIONS there answer 405 with `Allow: POST`, as the
# OpenAPI document says (matching both, aiohttp answered `Allow: GET, POST`).
@routes.get("/v1/models/{id:(?!pull$).+}")
@requires(MODELS_READ)
async def get_model(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    info = await ctx.registry.get(request.match_info["id"])
    return web.json_response(await _model_api(ctx, info))
