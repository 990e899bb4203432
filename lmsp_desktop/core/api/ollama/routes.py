"""Ollama's API on the service's port (`/api/…`), with our bearer tokens and scopes: models
(`version`, `tags`, `ps`, `show`) and generation (`chat`, `generate`), each generation a task
like any other (listed, cancelled when its client goes away, recovered, idempotent). Errors
have Ollama's shape, `{"error": "…"}`, on these routes and on any other path under `/api/`
(errors.py). Embeddings (`embed`, `embeddings`) are tasks of kind `embedding`, as
`/v1/embeddings` (core/api/embeddings/). A model name finds its model as in Ollama, with or
without `:latest` (names.py). A chat without messages or a generate without a prompt loads the
model, with `keep_alive` 0 unloads it (Ollama's `ollama stop`), answering Ollama's `done`
object with `done_reason` load or unload."""

from __future__ import annotations

import contextlib
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.answering import (
    cancel_on_disconnect,
    create_from_request,
    holding_key,
    settle_key,
    stream_rendered,
)
from lmsp_desktop.core.api.creation import Intake, requested_model
from lmsp_desktop.core.api.embeddings.creation import answer_embedding
from lmsp_desktop.core.api.ollama import CHAT_INTAKE, GENERATE_INTAKE
from lmsp_desktop.core.api.ollama import embed as embed_request
from lmsp_desktop.core.api.ollama.errors import PREFIX, ollama_error, unmatched_error
from lmsp_desktop.core.api.ollama.names import find_model, ollama_names
from lmsp_desktop.core.api.ollama.render import (
    OLLAMA_VERSION,
    AnswerRenderer,
    Clock,
    iso_now,
    running,
    show,
    tag,
)
from lmsp_desktop.core.api.ollama.request import LoadRequest, NoThinking
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import LmspError, ShuttingDownError, invalid
from lmsp_desktop.core.models.info import INVALID
from lmsp_desktop.core.models.messages import not_runnable
from lmsp_desktop.core.scopes import MODELS_READ, RESPONSES_WRITE
from lmsp_desktop.core.service.bodies import read_json
from lmsp_desktop.core.service.context import (
    ErrorBody,
    ServiceContext,
    errors_shaped,
    requires,
)
from lmsp_desktop.core.service.routes_models import load_model, run_fields, unload_model

routes = web.RouteTableDef()
NDJSON = "application/x-ndjson"


@routes.get("/api/version")
@errors_shaped(ollama_error)
@requires(MODELS_READ)
async def version(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    return web.json_response({"version": OLLAMA_VERSION})


@routes.get("/api/tags")
@errors_shaped(ollama_error)
@requires(MODELS_READ)
async def tags(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    """The models that can run (missing, changed and invalid files are left out), each by
    the name that finds it (names.ollama_names: `smollm2-135m-instruct:latest`)."""
    await ctx.registry.rescan_if_stale()  # a model pulled with the ollama CLI meanwhile
    listed = await ctx.registry.list_models()
    names = ollama_names(name for info in listed for name in info.names)
    # Each tag of a blob tagged twice, as `ollama list` shows it (one model, its aliases).
    models = [tag(info, names[n]) for info in listed if info.runnable for n in info.names]
    return web.json_response({"models": models})


@routes.get("/api/ps")
@errors_shaped(ollama_error)
@requires(MODELS_READ)
async def ps(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    """The models loaded now, with when the idle timeout will unload them, the context each
    runs with and the memory its load takes, from the plan GET /v1/models shows
    (run_fields)."""
    models = []
    runner = ctx.runner
    listed = await ctx.registry.list_models()
    names = ollama_names(n for info in listed for n in info.names)  # as /api/tags does
    for info in listed:
        if runner is None or runner.loaded_state(info.id) != "loaded":
            continue
        fields, decided = await run_fields(ctx, info)
        estimate = decided.estimate if decided is not None else None
        expires_in = runner.idle_seconds_left(info.id)
        models.append(running(info, names[info.id], expires_in, fields["context_length"], estimate))
    return web.json_response({"models": models})


@routes.post("/api/show")
@errors_shaped(ollama_error)
@requires(MODELS_READ)
async def show_model(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    body = await read_json(request)
    name = body.get("model") or body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not name:
        raise invalid("`model` is required: the name of a model from GET /api/tags.", "model")
    info = await find_model(ctx.registry, name)
    if info.state == INVALID:  # no details to show: 400 model_invalid, as generate answers
        raise not_runnable(info)
    fields, _plan = await run_fields(ctx, info)  # the context /v1/models shows
    return web.json_response(show(info, fields["context_length"]))


@routes.post("/api/chat")
@errors_shaped(ollama_error)
@requires(RESPONSES_WRITE)
async def chat(request: web.Request, ctx: ServiceContext, caller: Principal) -> web.StreamResponse:
    return await _generate(request, ctx, caller, CHAT_INTAKE, "chat")


@routes.post("/api/generate")
@errors_shaped(ollama_error)
@requires(RESPONSES_WRITE)
async def generate(
    request: web.Request, ctx: ServiceContext, caller: Principal
) -> web.StreamResponse:
    return await _generate(request, ctx, caller, GENERATE_INTAKE, "generate")


async def _load_or_unload(ctx: ServiceContext, asked: LoadRequest) -> web.Response:
    """Ollama's load (a chat without messages, a generate without a prompt) and unload (the
    same with `keep_alive` 0), answered as Ollama does: one object, `done_reason` load or
    unload. A load is the Models page's Load again (a model held after crashes included);
    an unload waits for no running task (it happens when they end)."""
    info = await find_model(ctx.registry, asked.model)
    if asked.unloads:
        await unload_model(ctx, info.id)
    else:  # a file that cannot run answers as a generate would (409 model_changed, …)
        await load_model(ctx, info.id, asked.keep_alive_s)
    body: dict[str, Any] = {"model": asked.model, "created_at": iso_now()}
    if asked.endpoint == "chat":
        body["message"] = {"role": "assistant", "content": ""}
    else:
        body["response"] = ""
    body.update(done=True, done_reason="unload" if asked.unloads else "load")
    return web.json_response(body)


@routes.post("/api/embed")
@errors_shaped(ollama_error)
@requires(RESPONSES_WRITE)
async def embed(request: web.Request, ctx: ServiceContext, caller: Principal) -> web.Response:
    """`{"model", "embeddings": [[…]], "total_duration", "load_duration", "prompt_eval_count"}`."""
    clock = Clock()

    def render(row: Any, vectors: Any, asked: dict[str, Any]) -> dict[str, Any]:
        timing = clock.fields(int(row["input_tokens"]), 0)
        return {
            "model": asked["model"],  # the name as sent, as Ollama echoes it
            "embeddings": vectors.tolist(),
            **{k: timing[k] for k in ("total_duration", "load_duration", "prompt_eval_count")},
        }

    return await _embedding(request, ctx, caller, embed_request.parse_embed, render)


@routes.post("/api/embeddings")
@errors_shaped(ollama_error)
@requires(RESPONSES_WRITE)
async def embeddings(request: web.Request, ctx: ServiceContext, caller: Principal) -> web.Response:
    """The older form: `{"embedding": […]}`."""

    def render(row: Any, vectors: Any, asked: dict[str, Any]) -> dict[str, Any]:
        return {"embedding": vectors[0].tolist()}

    return await _embedding(request, ctx, caller, embed_request.parse_embeddings, render)


async def _embedding(
    request: web.Request, ctx: ServiceContext, caller: Principal, parse: Any, render: Any
) -> web.Response:
    """The embedding task's answer once finished (idempotent under an Idempotency-Key, as
    `/v1/embeddings`)."""
    return await answer_embedding(request, ctx, caller.client_id, parse, render, find_model)


async def _generate(
    request: web.Request, ctx: ServiceContext, caller: Principal, intake: Intake, endpoint: str
) -> web.StreamResponse:
    clock = Clock()
    try:
        created = await create_from_request(request, ctx, caller, intake)
    except LoadRequest as asked:
        return await _load_or_unload(ctx, asked)
    except NoThinking as refused:
        # As Ollama: the model first (404 for one this service lacks), by the create's own
        # lookup; then what the model cannot do.
        await requested_model(ctx, refused.model, intake.find_model)
        raise
    if created.replayed:
        result = created.result
        return web.json_response(
            result.body, status=result.status, headers={"Idempotent-Replayed": "true"}
        )
    task_id = created.task_id
    runner = ctx.runner
    renderer = AnswerRenderer(
        created.request["model"],
        endpoint,
        clock,
        (lambda: runner.first_token_at(task_id)) if runner is not None else lambda: None,
    )
    async with holding_key(ctx, created.claim):
        if created.mode == "stream":
            # One JSON object per line as the events commit; the last has `done: true`.
            response = await stream_rendered(request, ctx, created.task_id, renderer, _open_ndjson)
        else:
            async with cancel_on_disconnect(request, ctx, created.task_id):
                await _follow(ctx, created.task_id, renderer)
            if not renderer.finished:
                raise ShuttingDownError()  # the task is left for recovery
            if renderer.failure is not None:
                raise LmspError(renderer.failure, code="generation_failed", status=500)
            response = web.json_response(renderer.final())
    final = renderer.final() if renderer.finished and renderer.failure is None else None
    await settle_key(ctx, created.claim, final)
    return response


async def _open_ndjson(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-cache"})
    await response.prepare(request)
    return response


async def _follow(ctx: ServiceContext, task_id: str, renderer: AnswerRenderer) -> None:
    """A `stream: false` answer: the events rendered until the task ends (or the service
    stops: the renderer is then not finished)."""
    async with contextlib.aclosing(ctx.follower.follow_batches(task_id, 0)) as batches:
        async for batch in batches:
            for event in batch:
                renderer.render(event)
                if renderer.finished:
                    return


# -- /v1/openapi.json ------------------------------------------------------------------------
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}
_OBJECT = {"type": "object"}


def _answer(description: str, *types: str) -> dict[str, Any]:
    return {"description": description, "content": {t: {"schema": _OBJECT} for t in types}}


def _operation(
    summary: str, scope: str, ok: dict[str, Any], codes: tuple[int, ...], body: bool
) -> dict[str, Any]:
    errors = {str(c): _answer("error", "application/json") for c in codes}
    for answer in errors.values():
        answer["content"]["application/json"]["schema"] = ERROR_SCHEMA
    op: dict[str, Any] = {
        "summary": summary,
        "description": f"Needs scope `{scope}`. Ollama's API; errors are `{{error}}`.",
        "responses": {"200": ok, **errors},
    }
    if body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _OBJECT}},
        }
    return op


_READ_ERRORS = (401, 403, 503)
_WRITE_ERRORS = (400, 401, 403, 404, 409, 413, 500, 503, 507)
_GENERATED = _answer("the answer: NDJSON lines unless `stream: false`", "application/json", NDJSON)
OPENAPI_PATHS = {
    "/api/version": {
        "get": _operation(
            "Ollama API version", MODELS_READ, _answer("{version}", "application/json"),
            _READ_ERRORS, False,
        )
    },
    "/api/tags": {
        "get": _operation(
            "Models (Ollama)", MODELS_READ, _answer("{models}", "application/json"),
            _READ_ERRORS, False,
        )
    },
    "/api/ps": {
        "get": _operation(
            "Loaded models (Ollama)", MODELS_READ, _answer("{models}", "application/json"),
            _READ_ERRORS, False,
        )
    },
    "/api/show": {
        "post": _operation(
            "A model's details (Ollama)", MODELS_READ, _answer("model", "application/json"),
            (400, 401, 403, 404, 413, 503), True,
        )
    },
    "/api/chat": {
        "post": _operation(
            "Chat (Ollama; a task like any other)", RESPONSES_WRITE, _GENERATED,
            _WRITE_ERRORS, True,
        )
    },
    "/api/generate": {
        "post": _operation(
            "Generate (Ollama; a task like any other)", RESPONSES_WRITE, _GENERATED,
            _WRITE_ERRORS, True,
        )
    },
    "/api/embed": {
        "post": _operation(
            "Embeddings (Ollama)", RESPONSES_WRITE,
            _answer("embeddings", "application/json"), _WRITE_ERRORS, True,
        )
    },
    "/api/embeddings": {
        "post": _operation(
            "Embeddings, older form (Ollama)", RESPONSES_WRITE,
            _answer("embedding", "application/json"), _WRITE_ERRORS, True,
        )
    },
}  # fmt: skip


# A request under /api/ that no route matched answers in Ollama's shape, naming the routes
# above (or what to do instead of Ollama's model management): collected by app.py, applied by
# context.error_body_of.
OFFERED_ROUTES = tuple(
    f"{method.upper()} {path}" for path, methods in OPENAPI_PATHS.items() for method in methods
)


def _unmatched(request: web.Request) -> ErrorBody:
    return unmatched_error(request, OFFERED_ROUTES)


UNMATCHED_ERRORS = {PREFIX: _unmatched}
