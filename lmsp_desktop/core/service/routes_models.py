"""`/v1/models`: the models the service knows, with digests and their loaded state; verify one
again and rescan, as the Models page's Verify selected and Rescan do; load and unload one
without the window."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.failures import STATUS_OF_CODE
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.context_window import effective_context
from lmsp_desktop.core.engines.base import EngineError
from lmsp_desktop.core.errors import LmspError, ShuttingDownError, error_type, invalid, not_found
from lmsp_desktop.core.models.info import CHANGED, OBSERVED, ModelInfo
from lmsp_desktop.core.models.memory import Plan
from lmsp_desktop.core.scopes import ADMIN, MODELS_READ
from lmsp_desktop.core.service.bodies import list_body, query_int, read_json
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
    if info.state == CHANGED:  # what a verify found on disk, and why it is no model if so
        item.update({k: info.meta[k] for k in OBSERVED if k in info.meta})
    if item.get("owned_by") == "local" and item["state"] != "invalid":
        # An invalid file runs with none: its header's value, if any, is not shown as one.
        item.update((await run_fields(ctx, info))[0])
    if ctx.runner is not None:
        pid = ctx.runner.engine_pid(info.id)
        if pid is not None:
            item["engine_pid"] = pid  # the worker process running it (docs/engine.md)
        crash = ctx.runner.last_crash(info.id)
        if crash is not None:
            item["engine_crash"] = crash.as_api()
    return item


async def run_fields(ctx: ServiceContext, info: ModelInfo) -> tuple[dict[str, Any], Plan | None]:
    """The `context_length`, `trained_context_length` and `memory_estimate` a model runs
    with when loaded, else would run with now: trained, capped by the settings, and (with a
    fitter) by the memory plan, returned beside them. The one rule for /v1/models and
    Ollama's /api/ps and /api/show."""
    fields: dict[str, Any] = {
        "context_length": effective_context(info.context_length, ctx.settings.max_context),
        "trained_context_length": info.context_length,
        "memory_estimate": None,
    }
    decided = await ctx.fitter.current(info) if ctx.fitter is not None else None
    if ctx.fitter is not None:
        fields.update(ctx.fitter.api_fields(info, decided))
    return fields, decided


@routes.get("/v1/models")
@requires(MODELS_READ)
async def list_models(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    await ctx.registry.rescan_if_stale()  # a model added to a store since the last scan
    return await _listed(ctx, request)


def _page(request: web.Request, listed: list[ModelInfo]) -> tuple[list[ModelInfo], bool]:
    """The page a query asks for: all models unless `limit` is given (OpenAI's list has no
    pages, and its SDK reads one); after the model `after` (Anthropic's `after_id`), or before
    `before_id` (Anthropic's other way back). 404 for a cursor that names no listed model."""
    query = request.query
    if not {"limit", "after", "after_id", "before_id"} & query.keys():
        return listed, False
    limit = query_int(request, "limit", len(listed) or 1, 1, 1000)
    ids = [info.id for info in listed]
    for name in ("after", "after_id", "before_id"):
        if name in query and query[name] not in ids:
            raise not_found(
                f"No model {query[name]!r} to page from: pass the id of a listed model.",
                "model_not_found",
                param=name,
            )
    after = query.get("after") or query.get("after_id")
    before = query.get("before_id")
    start, end = 0, len(listed)
    if before is not None:  # the `limit` models just before it
        end = ids.index(before)
        start = max(0, end - limit)
        return listed[start:end], start > 0
    if after is not None:
        start = ids.index(after) + 1
    return listed[start : start + limit], start + limit < end


async def _listed(ctx: ServiceContext, request: web.Request | None = None) -> web.Response:
    listed = await ctx.registry.list_models()
    page, has_more = _page(request, listed) if request is not None else (listed, False)
    models = [await _model_api(ctx, info) for info in page]
    body = list_body(models, has_more)
    # Anthropic's list page names its first and last ids (null when empty).
    body["first_id"] = models[0]["id"] if models else None
    body["last_id"] = models[-1]["id"] if models else None
    return web.json_response(body)


# Upstream and store models have a slash (gpu/llama-3-70b, org/repo:q4_k_m). Not `pull` nor
# `rescan`, nor an id ending in `/verify`, `/load` or `/unload`: those are the POST routes'
# (below and routes_downloads.py), and GET or OPTIONS there answer 405 with `Allow: POST`, as
# the OpenAPI document says (matching both, aiohttp answered `Allow: GET, POST`). An
# upstream's model named `verify` is then not looked up alone; it is listed, and runs, as any
# other.
@routes.get("/v1/models/{id:(?!(?:pull|rescan)$)(?!.+/(?:verify|load|unload)$).+}")
@requires(MODELS_READ)
async def get_model(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    info = await ctx.registry.get(request.match_info["id"])
    return web.json_response(await _model_api(ctx, info))


@routes.post("/v1/models/{id:.+}/verify")
@requires(ADMIN)
async def verify_model(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    """Hash the model's file again, as the Models page's Verify selected does (the registry's
    one verify): the digest recorded → verified (invalid, with its reason, when the file is
    not a complete GGUF); another digest → still `changed`, with `observed_digest`, unless
    the body says `{"accept_new": true}` (the window's "Accept the new file"). 200 with the
    model as GET /v1/models/{id} shows it; 409 model_missing when its file is gone."""
    accept_new = False
    if request.body_exists:
        body = await read_json(request)
        if not isinstance(body, dict):
            raise invalid('The body, when sent, must be a JSON object: {"accept_new": true}.', None)
        unknown = sorted(set(body) - {"accept_new"})
        if unknown:
            raise invalid(f"Unknown field {unknown[0]!r}; the one field is accept_new.", unknown[0])
        accept_new = body.get("accept_new", False)
        if not isinstance(accept_new, bool):
            raise invalid("accept_new must be true or false.", "accept_new")
    info = await ctx.registry.verify(request.match_info["id"], accept_new=accept_new)
    item = await _model_api(ctx, info)
    return web.json_response(item)


@routes.post("/v1/models/rescan")
@requires(ADMIN)
async def rescan_models(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    """Look in the model folders and stores again, as the Models page's Rescan does: new files
    are listed and hashed, files gone are `missing`, a missing file put back runs again. A
    `changed` file stays so (verify it). Answers the models list once the scan has hashed
    what it found (unchanged files are not read)."""
    await ctx.registry.scan()
    return await _listed(ctx)


# -- loading and unloading without the window ---------------------------------------------------
async def load_model(ctx: ServiceContext, model_id: str, keep_alive: float | None = None) -> None:
    """Load a model as the Models page's Load again does (runner.load_again: a model held
    after two crashes is released too): 409/404 for a file that cannot run, 507 when the
    load cannot fit the memory, the crash's message when its engine dies loading."""
    if ctx.runner is None:
        raise ShuttingDownError()
    try:
        await ctx.runner.load_again(model_id, keep_alive)
    except EngineError as exc:
        status = STATUS_OF_CODE.get(exc.code, 500)
        raise LmspError(exc.message, code=exc.code, status=status, type=error_type(status)) from exc


async def unload_model(ctx: ServiceContext, model_id: str) -> bool:
    """Unload a model now, or once the tasks running on it end; True when unloaded now."""
    if ctx.runner is None:
        return True
    return await ctx.runner.unload(model_id)


@routes.post("/v1/models/{id:.+}/load")
@requires(ADMIN)
async def load_model_route(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    """Load a model now (`lmsp-desktop models load`; the Models page's Load again), a model
    held after two engine crashes included. 200 with the model as GET /v1/models/{id}
    shows it (state loaded) once loaded."""
    info = await ctx.registry.get(request.match_info["id"])
    await load_model(ctx, info.id)
    return web.json_response(await _model_api(ctx, info))


@routes.post("/v1/models/{id:.+}/unload")
@requires(ADMIN)
async def unload_model_route(
    request: web.Request, ctx: ServiceContext, _: Principal
) -> web.Response:
    """Unload a model (`lmsp-desktop models unload`, `ollama stop`): at once when no task
    runs on it, else when its running tasks end (`unload_pending: true`, state still
    loaded); a task queued later loads it again. 200 with the model."""
    info = await ctx.registry.get(request.match_info["id"])
    now = await unload_model(ctx, info.id)
    item = await _model_api(ctx, info)
    item["unload_pending"] = not now
    return web.json_response(item)
