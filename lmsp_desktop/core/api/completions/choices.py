"""Several choices in one legacy completion (`prompt` a list of prompts, or `n` > 1), as
OpenAI, vLLM and llama-server answer them: one choice per prompt times `n`, `index` =
prompt position × n + j, the usage summed; streamed, each chunk carries its choice's index
and the stream ends once with the usage and `[DONE]`.

Each choice is a task of its own, a task like any other (listed, cancelled, recovered, run
side by side on the model's slots): one task holding several outputs would need the runner,
the events and every renderer to carry a choice index, where one task per choice leaves the
store's rules as they are. Every choice is admitted (parsed, its model found, its context
fitted) before any is stored, so a prompt that is refused leaves nothing running. The
answer's `id` is the first choice's task; `tasks` (LMSP) lists each choice's. An
Idempotency-Key is claimed with the first task, against the whole body, and keeps the whole
answer. A failed choice fails the request (its error, as for one prompt): the other
choices' tasks are cancelled, nobody being left to read them; so are all when the client
goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.answering import (
    TASK_ID,
    Heartbeat,
    cancel_on_disconnect,
    cancel_quietly,
    holding_key,
    settle_key,
)
from lmsp_desktop.core.api.completions import INTAKE
from lmsp_desktop.core.api.completions.render import CompletionChunks, choices_object
from lmsp_desktop.core.api.creation import (
    Admitted,
    Created,
    IdempotencyInput,
    admit_request,
    store_task,
)
from lmsp_desktop.core.api.failures import NO_RETRY, task_failure
from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.api.stopping import stopping_event
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import ShuttingDownError
from lmsp_desktop.core.service import sse
from lmsp_desktop.core.service.context import ServiceContext
from lmsp_desktop.core.states import TERMINAL, TaskState

# A choice's next chunks for the stream (None: the choice has no more), with its renderer
# and whether they end it with its error.
Piece = tuple[CompletionChunks, bytes | None, bool]


async def answer_choices(
    request: web.Request,
    ctx: ServiceContext,
    caller: Principal,
    body: dict[str, Any],
    bodies: list[dict[str, Any]],
) -> web.StreamResponse:
    """Create a task per choice body (`bodies`, in index order, split from `body`) and
    answer them as one `text_completion`, at once or as one stream."""
    client_id = caller.client_id
    admitted = [await admit_request(ctx, b, client_id=client_id, intake=INTAKE) for b in bodies]
    key = request.headers.get("Idempotency-Key")
    idempotency = IdempotencyInput(key, request.method, request.path) if key is not None else None
    # The key's digest is of the body as sent, not of the first choice's.
    first = await store_task(
        ctx,
        dataclasses.replace(admitted[0], body=body),
        client_id=client_id,
        intake=INTAKE,
        idempotency=idempotency,
    )
    if first.replayed:
        result = first.result
        return web.json_response(
            result.body, status=result.status, headers={"Idempotent-Replayed": "true"}
        )
    request[TASK_ID] = first.task_id
    async with holding_key(ctx, first.claim):
        created = [first, *await _store_rest(ctx, client_id, admitted[1:], first)]
        ids = [c.task_id for c in created]
        failed: str | None = None
        if first.mode == "stream":
            response, failed = await _stream(request, ctx, created)
        else:
            async with cancel_on_disconnect(request, ctx, *ids):
                failed = await _wait_all(ctx, ids)
            answer, status = await _settled(ctx, ids, failed)
            if answer is None:
                raise ShuttingDownError()  # the tasks are left for recovery
            headers = NO_RETRY if status != 200 else None
            response = web.json_response(answer, status=status, headers=headers)
    if first.claim is not None:
        answer, status = await _settled(ctx, ids, failed)
        await settle_key(ctx, first.claim, answer, status)
    return response


async def _store_rest(
    ctx: ServiceContext, client_id: str | None, admitted: list[Admitted], first: Created
) -> list[Created]:
    """The other choices' tasks, stored together (their creates share the writer's unit of
    work); if any cannot be, those stored are cancelled and the error raised."""
    stored = await asyncio.gather(
        *(store_task(ctx, a, client_id=client_id, intake=INTAKE) for a in admitted),
        return_exceptions=True,
    )
    made = [s for s in stored if isinstance(s, Created)]
    failure = next((s for s in stored if isinstance(s, BaseException)), None)
    if failure is not None:
        for task_id in [first.task_id, *(c.task_id for c in made)]:
            await cancel_quietly(ctx, task_id, "another choice of its request was not created")
        raise failure
    return made


async def _wait_all(ctx: ServiceContext, ids: list[str]) -> str | None:
    """Wait until every choice's task has ended (or the service stops); the first that fails
    (or is cancelled) has the others cancelled, the request failing with its error and
    nobody left to read them. Returns that first failed task's id, if any."""
    waiting = {asyncio.create_task(_failed(ctx, task_id)): task_id for task_id in ids}
    first: str | None = None
    try:
        while waiting:
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for ended in done:
                task_id = waiting.pop(ended)
                if ended.result() and first is None:
                    first = task_id
                    for other in waiting.values():
                        await cancel_quietly(ctx, other, f"{task_id} of its request failed")
    finally:
        for left in waiting:
            left.cancel()
    return first


async def _failed(ctx: ServiceContext, task_id: str) -> bool:
    await ctx.follower.wait_finished(task_id)
    row = await ctx.store.tasks.get(task_id)
    if TaskState(row["state"]) not in TERMINAL:  # the service is stopping
        return False
    return task_failure(build_response(row), when_output=True) is not None


async def _settled(
    ctx: ServiceContext, ids: list[str], failed: str | None = None
) -> tuple[dict[str, Any] | None, int]:
    """The answer once every choice's task has ended: the `text_completion`, or the error of
    the choice that failed first (`failed`; else the first failed in index order: the
    others' may be the cancels it caused); None while any is unfinished (the service
    stopped first)."""
    rows = [await ctx.store.tasks.get(task_id) for task_id in ids]
    if any(TaskState(row["state"]) not in TERMINAL for row in rows):
        return None, 200
    rows_first = sorted(rows, key=lambda row: row["id"] != failed)
    for row in rows_first:
        failure = task_failure(build_response(row), when_output=True)
        if failure is not None:
            return failure.body(), failure.status
    return choices_object(rows), 200


async def _stream(
    request: web.Request, ctx: ServiceContext, created: list[Created]
) -> tuple[web.StreamResponse, str | None]:
    """One stream of every choice's chunks as their events commit, each chunk whole and each
    choice's in order, under the first task's id; then the summed usage (if asked for) and
    `[DONE]` once all have ended. A choice that fails ends the stream with its error (its
    task id returned with the response)."""
    head = await ctx.store.tasks.get(created[0].task_id)
    renderers = [
        CompletionChunks(head, c.request, index=i, whole=False) for i, c in enumerate(created)
    ]
    chunks: asyncio.Queue[Piece] = asyncio.Queue()
    followers = [
        asyncio.create_task(_follow(ctx, c.task_id, renderer, chunks))
        for c, renderer in zip(created, renderers, strict=True)
    ]
    response = await sse.open_stream(request)
    beat = Heartbeat(response, sse.KEEPALIVE)
    gone = False
    failed: str | None = None
    try:
        async with cancel_on_disconnect(request, ctx, *(c.task_id for c in created)):
            opening = b"".join(r.opening() for r in renderers)
            if opening:
                await response.write(opening)
            left = len(renderers)
            while left and failed is None:
                renderer, data, failing = await chunks.get()
                if data is None:
                    left -= 1
                    continue
                await response.write(data)
                beat.sent = True
                if failing:
                    failed = created[renderers.index(renderer)].task_id
            if failed is None:
                await response.write(renderers[0].tail([r.usage for r in renderers]))
    except (ConnectionResetError, RuntimeError):
        gone = True
    finally:
        beat.stop()
        for follower in followers:
            follower.cancel()
    if (gone or failed is not None) and not ctx.follower.closed.is_set():
        # Nobody reads the other choices any more (a stopping service leaves them all
        # for recovery instead).
        for c, renderer in zip(created, renderers, strict=True):
            if not renderer.finished:
                await cancel_quietly(ctx, c.task_id, "its stream ended before it")
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response, failed


async def _follow(
    ctx: ServiceContext,
    task_id: str,
    renderer: CompletionChunks,
    chunks: asyncio.Queue[Piece],
) -> None:
    """One choice's chunks into the stream's queue, each batch of events as one piece,
    then None; a service stopping first ends the choice with its stopping error."""
    after = 0
    async with contextlib.aclosing(ctx.follower.follow_batches(task_id, 0)) as batches:
        async for batch in batches:
            pieces = []
            for event in batch:
                pieces.append(renderer.render(event))
                if renderer.finished:
                    break
            after = batch[-1]["sequence_number"]
            data = b"".join(pieces)
            if data:
                chunks.put_nowait((renderer, data, renderer.failed))
            if renderer.finished:
                break
    if not renderer.finished:  # the follower closed: the service is stopping
        ending = renderer.render(stopping_event(task_id, None, after))
        chunks.put_nowait((renderer, ending, True))
    chunks.put_nowait((renderer, None, False))
