"""An embedding task, created through the same steps as every task (core/api/creation.py:
refuse new work while paused, parse, model lookup, memory, fit the context, create) and
answered once finished. Its inputs are fitted one by one: each must hold in the context, or
with `truncate` (Ollama's /api/embed) is cut to its beginning that does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.answering import cancel_on_disconnect, holding_key, settle_key
from lmsp_desktop.core.api.creation import (
    OWNER_KEYSPACE,
    BodyReader,
    Created,
    IdempotencyInput,
    ModelFinder,
    refuse_new_work,
    requested_model,
)
from lmsp_desktop.core.api.failures import task_failure
from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.context_window import TokenCounter, effective_context
from lmsp_desktop.core.engines.base import EMBEDDING_CONTEXT
from lmsp_desktop.core.errors import LmspError, ShuttingDownError
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.models.info import INVALID
from lmsp_desktop.core.models.messages import not_runnable
from lmsp_desktop.core.service.bodies import read_json
from lmsp_desktop.core.service.context import ServiceContext
from lmsp_desktop.core.states import TERMINAL, TaskKind, TaskState
from lmsp_desktop.core.storage.embeddings import stored_vectors, vectors_of
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim, request_digest, validate_key
from lmsp_desktop.core.storage.tasks import NewTask

Parser = Callable[[Any, str], dict[str, Any]]
# The finished task's row, its vectors and stored request → the API's answer body.
Render = Callable[[Any, Any, dict[str, Any]], dict[str, Any]]


async def answer_embedding(
    request: web.Request,
    ctx: ServiceContext,
    client_id: str | None,
    parse: Parser,
    render: Render,
    find_model: ModelFinder | None = None,
) -> web.Response:
    """Create the embedding task of an HTTP request and answer it once finished, rendered by
    `render`. Under an Idempotency-Key (LMSP_API.md: any POST) the answer is stored with the
    key and a retry with the same body gets it again, `Idempotent-Replayed: true`, with no
    new task; another body under the key, 422. A failed task's key is released (a retry
    runs again), as is one whose client went away."""
    key = request.headers.get("Idempotency-Key")
    created = await create_embedding(
        ctx,
        lambda: read_json(request),
        client_id=client_id,
        parse=parse,
        find_model=find_model,
        idempotency=None if key is None else IdempotencyInput(key, request.method, request.path),
    )
    if created.replayed:
        result = created.result
        return web.json_response(
            result.body, status=result.status, headers={"Idempotent-Replayed": "true"}
        )
    async with holding_key(ctx, created.claim):
        row, vectors = await finished_embedding(request, ctx, created.task_id)
        body = render(row, vectors, created.request)
    await settle_key(ctx, created.claim, body)
    return web.json_response(body)


async def create_embedding(
    ctx: ServiceContext,
    body: BodyReader,
    *,
    client_id: str | None,
    parse: Parser,
    find_model: ModelFinder | None = None,
    idempotency: IdempotencyInput | None = None,
) -> Created:
    """Create the embedding task of a request body (or, under an Idempotency-Key used
    before, replay its answer). 400 for an input longer than the model's context, before
    anything is stored. `find_model`: the API's own way from a model name to a model
    (creation.Intake.find_model). The key is claimed in the task's transaction, as every
    create's (creation.create_task); the caller settles it (answering.settle_key)."""
    refuse_new_work(ctx)
    raw = await body()
    request = parse(raw, ctx.settings.default_on_restart)
    info, model_id = await requested_model(ctx, request["model"], find_model)
    if info.state == INVALID:
        raise not_runnable(info)
    limit = None
    if ctx.fitter is not None:
        loaded = ctx.runner.loaded_state(info.id) if ctx.runner is not None else "unloaded"
        decided = await ctx.fitter.admit(info, loaded)
        limit = decided.context_length if decided is not None else None
    if ctx.tokens is not None and getattr(info, "source", "upstream") != "upstream":
        counts = await asyncio.to_thread(ctx.tokens.count_inputs, info, request["input"])
        chat = limit or effective_context(info.context_length, ctx.settings.max_context)
        context = min(chat, EMBEDDING_CONTEXT)  # the embedding context's cap (engines/base.py)
        if request.get("truncate") and counts:
            counts = await asyncio.to_thread(_cut_to, ctx.tokens, info, request, counts, context)
        for n, count in enumerate(counts or []):
            if count > context:
                raise LmspError(
                    f"This model's maximum context length is {context} tokens for an embedding"
                    f" input, but input {n} is {count} tokens long; split it into shorter "
                    "pieces.",
                    code="context_length_exceeded",
                    param="input",
                    status=400,
                )
    claim = None
    if idempotency is not None:
        claim = IdempotencyClaim(
            client_id or OWNER_KEYSPACE,
            validate_key(idempotency.key),
            request_digest(idempotency.method, idempotency.path, raw),
            ctx.settings.idempotency_ttl_s,
        )
    result = await ctx.store.tasks.create(
        NewTask(
            model=model_id,
            request=request,
            on_restart=request["on_restart"],
            mode="sync",
            client_id=client_id,
            id=new_id("emb"),
            kind=TaskKind.EMBEDDING,
        ),
        claim,
    )
    return Created(result.task_id, "sync", request, result, claim)


def _cut_to(
    tokens: TokenCounter,
    info: Any,
    request: dict[str, Any],
    counts: list[int],
    context: int,
) -> list[int]:
    """Ollama's `truncate` (its /api/embed's default): each input longer than the context cut
    to its beginning that fits, instead of refused, and said in the task's notes. A text keeps
    its longest beginning whose tokens fit (counted as the engine will tokenize it), token ids
    their first `context`. Returns the inputs' counts after the cut."""
    inputs = list(request["input"])
    notes = list(request.get("notes") or [])
    out = list(counts)
    for n, count in enumerate(counts):
        if count <= context:
            continue
        item = inputs[n]
        if isinstance(item, str):
            inputs[n], out[n] = _fitting_beginning(tokens, info, item, context)
        else:
            inputs[n], out[n] = item[:context], context
        notes.append(
            f"Input {n} ({count} tokens) was cut to its first {out[n]} tokens to fit the "
            f"{context}-token context (`truncate` true)."
        )
    request["input"], request["notes"] = inputs, notes
    return out


def _fitting_beginning(tokens: TokenCounter, info: Any, text: str, context: int) -> tuple[str, int]:
    """The longest beginning of `text` (in characters) whose token count fits `context`, and
    that count: a binary search, each step counted with the model's tokenizer."""
    lo, hi, best = 0, len(text), ("", 0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        [count] = tokens.count_inputs(info, [text[:mid]]) or [0]
        if count <= context:
            lo, best = mid, (text[:mid], count)
        else:
            hi = mid - 1
    return best


async def finished_embedding(
    request: web.Request, ctx: ServiceContext, task_id: str
) -> tuple[Any, Any]:
    """Wait for the task (cancelled if the client goes away); its row and vectors, or the
    task's error as an LmspError. 503 when the service stops first (left for recovery)."""
    async with cancel_on_disconnect(request, ctx, task_id):
        await ctx.follower.wait_finished(task_id)
    row = await ctx.store.tasks.get(task_id)
    if TaskState(row["state"]) not in TERMINAL:
        raise ShuttingDownError()
    failure = task_failure(build_response(row), when_output=True)
    if failure is not None:
        raise failure
    return row, stored_vectors(await vectors_of(ctx.store.tasks, task_id))
