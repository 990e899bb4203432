"""What a stream tells its client when the service stops before the stream's task ended.

A sync request gets 503 `shutting_down` then (answering.wait_for_final); a stream gets the
same meaning as its API's own error ending, so that no client takes a stream cut by a stop
for a finished answer. The ending is the standard `error` event below, which each API's
view turns into its shape where it already turns a task's failure into it: the Responses
and tasks routes send it as it is, Chat Completions and completions as an error chunk,
Anthropic as `event: error`, Ollama as an `{"error": …}` line.

Nothing is written to the store for it: the task is left as it is, and recovery applies its
`on_restart` policy at the next start (LMSP chapter 11), as after a crash.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from lmsp_desktop.core.errors import LmspError, ShuttingDownError
from lmsp_desktop.core.service.context import ServiceContext
from lmsp_desktop.core.states import TERMINAL, TaskState

if TYPE_CHECKING:
    from lmsp_desktop.core.api.answering import StreamRenderer

log = logging.getLogger(__name__)

# How long a stream the stop ends may take to end: the look at whether its task finished
# meanwhile, and the write of the ending. A client that does not take it in time is cut off
# (its task is left for recovery all the same): no slow client holds the stop up.
ENDING_S = 0.5
PAGE = 500


def left_unfinished(task_id: str, on_restart: str | None) -> str:
    policy = f"its on_restart policy ({on_restart})" if on_restart else "its on_restart policy"
    return (
        f"The service is stopping, so {task_id} was left unfinished: when the service starts "
        f"again, it follows {policy} and can then be retrieved by its id."
    )


def stopping_event(task_id: str, on_restart: str | None, after: int) -> dict[str, Any]:
    """The standard `error` event (code `shutting_down`) that ends a stream whose task the
    stopping service leaves unfinished. Never committed: its sequence number is the last one
    the stream had sent, so a client resuming from it (`starting_after`, `Last-Event-ID`) after
    the restart misses nothing."""
    error = ShuttingDownError(left_unfinished(task_id, on_restart))
    return {"type": "error", "sequence_number": after, **error.body()}


async def end_stopped(
    request: web.Request,
    response: web.StreamResponse,
    ctx: ServiceContext,
    task_id: str,
    after: int,
    renderer: StreamRenderer,
) -> None:
    """End a stream that the stopping service cut before its task's end: with the events
    committed since `after` and, unless they end the task (it finished meanwhile), the
    stopping event, as the stream's renderer shows them. Within ENDING_S, else the
    connection is dropped. A client gone by then is not told, and its task not cancelled:
    it is left for recovery as every unfinished task is."""
    try:
        async with asyncio.timeout(ENDING_S):
            data = await _rest(ctx, task_id, after, renderer)
            if data:
                await response.write(data)
            await response.write_eof()
    except TimeoutError:
        log.info("the stream of task %s was cut off: its ending was not taken in time", task_id)
        if request.transport is not None:
            request.transport.abort()
    except (ConnectionResetError, RuntimeError):
        pass


async def _rest(ctx: ServiceContext, task_id: str, after: int, renderer: StreamRenderer) -> bytes:
    """The bytes still owed: the events committed since `after`, then the stopping event
    unless they ended the task (a task the store cannot be asked about is taken as
    unfinished)."""
    chunks: list[bytes] = []
    on_restart: str | None = None
    try:
        row = await ctx.store.tasks.get(task_id)
        on_restart = str(row["on_restart"])
        last_seq = int(row["last_seq"])
        while after < last_seq and not renderer.finished:
            events = await ctx.store.tasks.events(task_id, after, PAGE)
            if not events:
                break
            for event in events:
                chunks.append(renderer.render(event))
                after = event["sequence_number"]
                if renderer.finished:
                    break
        if TaskState(row["state"]) in TERMINAL:  # it ended meanwhile: its ending is sent
            return b"".join(chunks)
    except LmspError as exc:
        if exc.status == 404:  # deleted meanwhile: nothing more to tell
            return b""
        log.warning("task %s: its stream ends without a look at the store: %s", task_id, exc)
    except Exception:
        log.exception("task %s: its stream ends without a look at the store", task_id)
    if not renderer.finished:
        chunks.append(renderer.render(stopping_event(task_id, on_restart, after)))
    return b"".join(chunks)
