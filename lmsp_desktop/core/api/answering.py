"""Answering a created task over HTTP, for every API's create route: follow its events as
SSE, wait for its finished object, cancel it when the client goes away, and store or
release its idempotency key.

Each route keeps its own choice of sync, stream or background answer and its own shapes;
what they share is here, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from lmsp_desktop.core.api.creation import Created, IdempotencyInput, Intake, create_task
from lmsp_desktop.core.api.failures import NO_RETRY, task_failure
from lmsp_desktop.core.api.resource import RowLike, build_response
from lmsp_desktop.core.api.stopping import end_stopped
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import LmspError, ShuttingDownError
from lmsp_desktop.core.service import sse
from lmsp_desktop.core.service.bodies import read_json
from lmsp_desktop.core.service.context import ErrorBody, ServiceContext
from lmsp_desktop.core.states import ENDING_EVENTS, TERMINAL, TaskState
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim, complete_key, release_key

log = logging.getLogger(__name__)

# An event as a route shows it to its clients, or None to leave it out of the stream.
EventView = Callable[[dict[str, Any]], dict[str, Any] | None]
DISCONNECT_POLL_S = 0.25
# A stream with nothing to send for this long (a long prompt being read before the first
# token) sends its API's keep-alive: clients' and proxies' idle watchdogs see it alive
# (Claude Code dropped a turn silent for 300 s, then sent it again as a second request).
KEEPALIVE_S = 10.0
TASK_ID = web.RequestKey("lmsp_task_id", str)  # the task a request created: its DEBUG line


async def create_from_request(
    request: web.Request,
    ctx: ServiceContext,
    caller: Principal,
    intake: Intake,
    body: Any = None,
) -> Created:
    """Create the task an HTTP create route is asked for, through the one creation path: the
    body is read only once the service takes work (unless the route read it, `body`), and
    an Idempotency-Key header (when sent) is claimed against this method, path and body."""
    key = request.headers.get("Idempotency-Key")
    idempotency = IdempotencyInput(key, request.method, request.path) if key is not None else None
    created = await create_task(
        ctx,
        (lambda: read_json(request)) if body is None else body,
        client_id=caller.client_id,
        intake=intake,
        idempotency=idempotency,
    )
    request[TASK_ID] = created.task_id
    return created


def shown_as_is(event: dict[str, Any]) -> dict[str, Any] | None:
    return event


def ends_with_error(shown: dict[str, Any]) -> bool:
    return bool(shown.get("type") == "error")


@contextlib.asynccontextmanager
async def cancel_on_disconnect(
    request: web.Request, ctx: ServiceContext, *task_ids: str
) -> AsyncIterator[None]:
    """Cancel the task (every task of a request answered by several: legacy completions'
    choices) if the client goes away (its CPU is freed, its partial output kept)."""

    async def watch() -> None:
        while True:
            await asyncio.sleep(DISCONNECT_POLL_S)
            transport = request.transport
            if transport is None or transport.is_closing():
                for task_id in task_ids:
                    await cancel_quietly(ctx, task_id, "its client went away")
                return

    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        watcher.cancel()


async def cancel_quietly(ctx: ServiceContext, task_id: str, why: str) -> None:
    """Cancel a task nobody waits for any more; a failure is logged, never raised (the task
    may have finished meanwhile: 409), because nobody is left to show it to."""
    try:
        await ctx.store.tasks.cancel(task_id)
        log.info("task %s cancelled: %s", task_id, why)
    except LmspError as exc:
        log.info("task %s not cancelled after %s: %s", task_id, why, exc.message)
    except Exception:
        log.exception("task %s: cancel after %s failed", task_id, why)


class StreamRenderer(Protocol):
    """An API's stream of one task: the bytes each committed event becomes."""

    finished: bool  # the last event of the stream was rendered
    # What the stream sends when it has been silent for KEEPALIVE_S: an SSE comment, an
    # API's own ping event, or b"" where the format has none (NDJSON).
    keepalive: bytes

    def opening(self) -> bytes: ...

    def render(self, event: dict[str, Any]) -> bytes: ...


class ShownEvents:
    """A route's view of a task's events as a stream (stream_events): each event it shows,
    SSE-encoded; finished at the task's own ending (its terminal event, or a shown event that
    `is_last`)."""

    keepalive = sse.KEEPALIVE

    def __init__(
        self,
        view: EventView,
        is_last: Callable[[dict[str, Any]], bool],
        encode: Callable[[dict[str, Any]], bytes],
    ) -> None:
        self.finished = False
        self._view = view
        self._is_last = is_last
        self._encode = encode

    def opening(self) -> bytes:
        return b""

    def render(self, event: dict[str, Any]) -> bytes:
        if event["type"] in ENDING_EVENTS:
            self.finished = True
        shown = self._view(event)
        if shown is None:
            return b""
        if self._is_last(shown):
            self.finished = True
        return self._encode(shown)


async def send_events(
    request: web.Request,
    response: web.StreamResponse,
    ctx: ServiceContext,
    task_id: str,
    after: int,
    renderer: StreamRenderer,
) -> None:
    """The renderer's opening, then the task's events after `after`, each batch in one write
    as it commits (each event whole, in order), until the renderer is finished. When the
    service stops first, the stream ends with its API's error ending (core/api/stopping.py).
    Raises ConnectionResetError or RuntimeError when the client has gone."""
    opening = renderer.opening()
    if opening:
        await response.write(opening)
    beat = Heartbeat(response, renderer.keepalive)
    try:
        async with contextlib.aclosing(ctx.follower.follow_batches(task_id, after)) as batches:
            async for batch in batches:
                chunks: list[bytes] = []
                for event in batch:
                    chunks.append(renderer.render(event))
                    if renderer.finished:
                        break
                after = batch[-1]["sequence_number"]
                data = b"".join(chunks)
                if data:
                    await response.write(data)
                    beat.sent = True
                if renderer.finished:
                    return
        if ctx.follower.closed.is_set():  # not the task's end: the service is stopping
            await end_stopped(request, response, ctx, task_id, after, renderer)
    finally:
        beat.stop()


class Heartbeat:
    """A stream's keep-alive: written every KEEPALIVE_S in which nothing else was (`sent`
    is set by each write of the stream's own), until `stop`. Each write is whole, so a
    keep-alive never lands inside an event."""

    def __init__(self, response: web.StreamResponse, keepalive: bytes) -> None:
        self.sent = False
        self._task = asyncio.create_task(self._beat(response, keepalive)) if keepalive else None

    async def _beat(self, response: web.StreamResponse, keepalive: bytes) -> None:
        with contextlib.suppress(ConnectionResetError, RuntimeError):  # the client left
            while True:
                await asyncio.sleep(KEEPALIVE_S)
                if not self.sent:
                    await response.write(keepalive)
                self.sent = False

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def stream_events(
    request: web.Request,
    ctx: ServiceContext,
    task_id: str,
    after: int,
    view: EventView = shown_as_is,
    *,
    is_last: Callable[[dict[str, Any]], bool] = ends_with_error,
    encode: Callable[[dict[str, Any]], bytes] = sse.encode,
) -> tuple[web.StreamResponse, bool]:
    """Replay the task's events after `after` as SSE, then follow them until the task ends
    (or until an event `is_last`). Returns the response and whether the client went away
    before the end."""
    response = await sse.open_stream(request)
    gone = False
    try:
        await send_events(
            request, response, ctx, task_id, after, ShownEvents(view, is_last, encode)
        )
    except (ConnectionResetError, RuntimeError):
        gone = True
    with contextlib.suppress(ConnectionResetError, RuntimeError):  # the client already left
        await response.write_eof()
    return response, gone


async def stream_rendered(
    request: web.Request,
    ctx: ServiceContext,
    task_id: str,
    renderer: StreamRenderer,
    open_stream: Callable[[web.Request], Awaitable[web.StreamResponse]] = sse.open_stream,
) -> web.StreamResponse:
    """An API's own stream of a task's events (Chat Completions chunks, Anthropic's events,
    completions, Ollama's NDJSON lines with its own `open_stream`): the opening, then each
    batch of events as it commits, in one write, until the renderer says the stream is
    finished. A client that goes away cancels the task (its partial output is kept)."""
    response = await open_stream(request)
    gone = False
    try:
        async with cancel_on_disconnect(request, ctx, task_id):
            await send_events(request, response, ctx, task_id, 0, renderer)
    except (ConnectionResetError, RuntimeError):
        gone = True
    if gone:  # a stream's client that goes away cancels its task (LMSP_API.md)
        await cancel_quietly(ctx, task_id, "its stream's client went away")
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response


@dataclass(frozen=True)
class Answering:
    """How an API that answers at once or as a stream (no background) shows its tasks."""

    # The finished task's row → the API's answer body.
    body: Callable[[RowLike], dict[str, Any]]
    # The task's row and request → the renderer of its stream.
    stream: Callable[[RowLike, dict[str, Any]], StreamRenderer]
    # A failed task's error, as the API's clients read errors.
    error: ErrorBody = LmspError.body


async def answer_created(
    request: web.Request,
    ctx: ServiceContext,
    caller: Principal,
    intake: Intake,
    how: Answering,
    body: Any = None,
) -> web.StreamResponse:
    """Create the task of a sync-or-stream API's request and answer it: the stream as it
    is generated, or the finished body (a failed task as an HTTP error); an idempotent
    retry gets the stored answer again. `body`: the body, when the route has read it."""
    created = await create_from_request(request, ctx, caller, intake, body)
    if created.replayed:
        result = created.result
        return web.json_response(
            result.body, status=result.status, headers={"Idempotent-Replayed": "true"}
        )
    task_id = created.task_id
    async with holding_key(ctx, created.claim):
        if created.mode == "stream":
            row = await ctx.store.tasks.get(task_id)
            renderer = how.stream(row, created.request)
            response = await stream_rendered(request, ctx, task_id, renderer)
        else:
            async with cancel_on_disconnect(request, ctx, task_id):
                await ctx.follower.wait_finished(task_id)
            response = await final_answer(ctx, task_id, how)
    if created.claim is not None:
        body, status = await settled_answer(ctx, task_id, how)
        await settle_key(ctx, created.claim, body, status)
    return response


async def settled_answer(
    ctx: ServiceContext, task_id: str, how: Answering
) -> tuple[dict[str, Any] | None, int]:
    """What an idempotent retry gets: the answer body, the error of a failed task, or None
    (nothing final: the key is released)."""
    row = await ctx.store.tasks.get(task_id)
    if TaskState(row["state"]) not in TERMINAL:
        return None, 200
    failure = task_failure(build_response(row), when_output=True)
    if failure is not None:
        return how.error(failure), failure.status
    return how.body(row), 200


async def final_answer(ctx: ServiceContext, task_id: str, how: Answering) -> web.Response:
    body, status = await settled_answer(ctx, task_id, how)
    if body is None:
        # Stopped waiting because the service is shutting down: the task is left for
        # recovery; a half-done 200 would look like a final answer.
        raise ShuttingDownError()
    return web.json_response(body, status=status, headers=NO_RETRY if status != 200 else None)


async def finished_object(ctx: ServiceContext, task_id: str) -> dict[str, Any] | None:
    """The response object if its task has finished, else None (the service is stopping)."""
    final = await ctx.store.tasks.response_object(task_id)
    return final if TaskState(final["task"]["state"]) in TERMINAL else None


async def wait_for_final(request: web.Request, ctx: ServiceContext, task_id: str) -> dict[str, Any]:
    """The finished response object of a sync request; the task is cancelled if the client
    goes away first. 503 when the service stops first: the task is left for recovery, and a
    half-done 200 would look like a final answer."""
    async with cancel_on_disconnect(request, ctx, task_id):
        await ctx.follower.wait_finished(task_id)
    final = await finished_object(ctx, task_id)
    if final is None:
        raise ShuttingDownError()
    return final


@contextlib.asynccontextmanager
async def holding_key(ctx: ServiceContext, claim: IdempotencyClaim | None) -> AsyncIterator[None]:
    """While a request is being answered its key is in flight; if answering fails, the key is
    released so a retry is not refused with 409."""
    try:
        yield
    except BaseException:
        if claim is not None:
            await release_key(ctx.store.db, claim)
        raise


async def settle_key(
    ctx: ServiceContext,
    claim: IdempotencyClaim | None,
    answer: dict[str, Any] | None,
    status: int = 200,
) -> None:
    """After answering: store the final `answer` (and its status: an error body for a task
    that failed) to replay, or release the key when there is nothing final to replay (client
    gone, or shutdown)."""
    if claim is None:
        return
    if answer is not None:
        await complete_key(ctx.store.db, claim, status, answer)
    else:
        await release_key(ctx.store.db, claim)
