"""The one way a task is created, whoever asks: every API's create route and the desktop
app's "Try a prompt…" call `create_task` with the API's `Intake`.

The order is the rule: refuse new work while paused or shutting down → parse the body into
the task request → what the API must look up in the store (earlier turns) → look the model
up (404 before anything is stored) → fit the context → claim the idempotency key and create
the task with its first event, in one transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmsp_desktop.core.context_window import Shorten, admit
from lmsp_desktop.core.errors import PausedError, ShuttingDownError
from lmsp_desktop.core.models.info import CHANGED, INVALID, MISSING
from lmsp_desktop.core.models.messages import not_runnable
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim, request_digest, validate_key
from lmsp_desktop.core.storage.tasks import CreateResult, NewTask, TaskStore

if TYPE_CHECKING:
    from lmsp_desktop.core.models.info import ModelInfo
    from lmsp_desktop.core.models.registry import ModelRegistry
    from lmsp_desktop.core.service.context import ServiceContext

# Body → the task request (core/api/task_request.py), stored with the task; raises LmspError
# 400s. Takes the default restart policy from the settings.
Parser = Callable[[Any, str], dict[str, Any]]
# Fills in what the request refers to in the store (the task store, the request, the caller).
Prepare = Callable[[TaskStore, dict[str, Any], str | None], Awaitable[None]]
# Reads the body only once the service is known to take work (an HTTP route passes one).
BodyReader = Callable[[], Awaitable[Any]]
# An API's own way from the model name a request gives to a model, for an API whose names are
# more than ids (Ollama's `x:latest` names `x`): the model, or 404 model_not_found.
ModelFinder = Callable[["ModelRegistry", str], Awaitable["ModelInfo"]]
# Idempotency keys of the owner (the app, the local CLI) live in their own keyspace.
OWNER_KEYSPACE = "owner"


async def nothing_to_prepare(tasks: TaskStore, request: dict[str, Any], caller: str | None) -> None:
    return None


@dataclass(frozen=True)
class Intake:
    """How one API's requests become tasks (each API's folder defines its own)."""

    parse: Parser
    # The id of a new task, as the API's clients expect ids to look (`resp_…`, `chatcmpl-…`).
    new_id: Callable[[], str]
    # Earlier turns the request refers to (Responses' previous_response_id), resolved before
    # the context is fitted.
    prepare: Prepare = nothing_to_prepare
    # The request field a too-long input is reported against.
    input_param: str = "input"
    # Whether the API lets a client ask for the oldest turns to be dropped when the input
    # does not fit (Responses' `truncation: "auto"`): a too-long input's 400 suggests it
    # only where a client can send it.
    can_truncate: bool = False
    # How the API shortens an input that does not fit when its request asks for truncation
    # (Ollama drops single messages, then cuts the last one's beginning); None: the oldest
    # turns are dropped, as Responses' `truncation: "auto"` does.
    shorten: Shorten | None = None
    # How the API's model names find a model; None: a name is the model's id.
    find_model: ModelFinder | None = None


@dataclass(frozen=True)
class IdempotencyInput:
    """What a request's Idempotency-Key is checked against: the key as sent, and the method
    and path that, with the body, make the request's digest."""

    key: str
    method: str = "POST"
    path: str = "/v1/responses"


@dataclass(slots=True)
class Created:
    """A created task (or a replayed idempotent answer) and what answering it needs. Not
    frozen: a frozen dataclass sets each field through object.__setattr__, and one is made
    per create (B1); nothing changes it once made."""

    task_id: str
    mode: str  # "background", "stream" or "sync"
    request: dict[str, Any]  # the normalised request stored with the task
    result: CreateResult  # the 200/202 body, or the replayed answer when `result.replayed`
    claim: IdempotencyClaim | None  # held until the answer is stored or released

    @property
    def replayed(self) -> bool:
        return self.result.replayed


def mode_of(request: dict[str, Any]) -> str:
    """How the client waits: background (answer 202 now), stream (SSE) or sync (one 200)."""
    if request.get("background"):
        return "background"
    return "stream" if request.get("stream") else "sync"


async def requested_model(
    ctx: ServiceContext, name: str, find: ModelFinder | None
) -> tuple[ModelInfo, str]:
    """The model a request names, and the model id its task is stored with (what the runner
    loads): the name itself, or with an API's own finder the id of the model it found. The
    request keeps the name as sent, which the API's answers echo."""
    if find is None:
        return await ctx.registry.get(name), name
    info = await find(ctx.registry, name)
    return info, info.id


def refuse_new_work(ctx: ServiceContext) -> None:
    """503 while shutting down or paused by the owner (drain: accepted tasks still finish)."""
    if ctx.shutting_down:
        raise ShuttingDownError()
    if ctx.paused:
        raise PausedError()


async def create_task(
    ctx: ServiceContext,
    body: Any | BodyReader,
    *,
    client_id: str | None,
    intake: Intake,
    idempotency: IdempotencyInput | None = None,
) -> Created:
    """Create a task from a request body as the caller `client_id` (None: the owner).

    `body` is the decoded JSON body, or an async function that reads it (so a paused service
    answers 503 without reading the body). `intake` is the API's: it parses the body into
    the task request and names the new task. When `idempotency` is given, the key is
    claimed in the task's transaction; the caller then stores the final answer under it (or
    releases it) with `core.api.answering.settle_key`.
    """
    refuse_new_work(ctx)
    if callable(body):
        body = await body()
    admitted = await admit_request(ctx, body, client_id=client_id, intake=intake)
    return await store_task(
        ctx, admitted, client_id=client_id, intake=intake, idempotency=idempotency
    )


@dataclass(slots=True)
class Admitted:
    """A request ready to be stored as a task: parsed, its model found, its context fitted."""

    body: Any  # the body as decoded: an Idempotency-Key's digest is of it
    request: dict[str, Any]
    model_id: str


async def admit_request(
    ctx: ServiceContext, body: Any, *, client_id: str | None, intake: Intake
) -> Admitted:
    """Everything a create checks before it stores anything: the body parsed into the task
    request, the earlier turns it refers to, its model (404), the memory to load it (507)
    and its context (400, or truncated). A request answered with several tasks (legacy
    completions' several prompts) admits each before storing any."""
    request = intake.parse(body, ctx.settings.default_on_restart)
    # The earlier turns (previous_response_id, item_reference) from the caller's own stored
    # responses; then the model (404 before anything is stored) and the context it runs
    # with (400 context_length_exceeded, or the oldest turns dropped with truncation auto).
    await intake.prepare(ctx.store.tasks, request, client_id)
    name = request["model"]
    known = ctx.registry.known(name) if intake.find_model is None else None
    if known is not None:  # what requested_model gives, without awaiting it (B1)
        info, model_id = known, name
    else:
        info, model_id = await requested_model(ctx, name, intake.find_model)
    if info.state in (CHANGED, MISSING):
        # A launch's scan may still be recording the file put back: its word, not the last
        # run's. Then a file gone or changed is refused here, before its tokenizer is read
        # (llama.cpp would parse a file changed since it was verified, in this process) and
        # before a task is stored only to fail at its run (LMSP_API.md: not run until
        # verified again).
        await ctx.registry.gate.wait_recorded()
        info = await ctx.registry.get(info.id)
    if info.state in (INVALID, CHANGED, MISSING):  # 400 model_invalid, 409 model_changed/…
        raise not_runnable(info)
    # A model that must be loaded and cannot fit the memory: 507 before anything is stored.
    decided = None
    if ctx.fitter is not None:
        loaded = ctx.runner.loaded_state(info.id) if ctx.runner is not None else "unloaded"
        decided = await ctx.fitter.admit(info, loaded)
    await admit(
        ctx.tokens,
        info,
        request,
        ctx.settings.max_context,
        decided,
        param=intake.input_param,
        can_truncate=intake.can_truncate,
        shorten=intake.shorten,
    )
    return Admitted(body, request, model_id)


async def store_task(
    ctx: ServiceContext,
    admitted: Admitted,
    *,
    client_id: str | None,
    intake: Intake,
    idempotency: IdempotencyInput | None = None,
) -> Created:
    """Store an admitted request as a new task with its first event, in one transaction
    with the claim of its Idempotency-Key (when given: a key already answered replays)."""
    request = admitted.request
    mode = mode_of(request)
    claim = None
    if idempotency is not None:
        claim = IdempotencyClaim(
            client_id or OWNER_KEYSPACE,
            validate_key(idempotency.key),
            request_digest(idempotency.method, idempotency.path, admitted.body),
            ctx.settings.idempotency_ttl_s,
        )
    result = await ctx.store.tasks.create(
        NewTask(
            model=admitted.model_id,
            request=request,
            on_restart=request["on_restart"],
            mode=mode,
            client_id=client_id,
            id=intake.new_id(),
        ),
        claim,
    )
    return Created(result.task_id, mode, request, result, claim)
