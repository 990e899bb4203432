"""`/v1/tasks`: the task list with filters and cursor paging, one task, its event log."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.answering import stream_events
from lmsp_desktop.core.api.resource import task_object
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.scopes import RESPONSES_READ, RESPONSES_WRITE
from lmsp_desktop.core.service.bodies import list_body, query_int
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.states import STATE_NAMES, TaskState
from lmsp_desktop.core.views import TaskFilter

routes = web.RouteTableDef()


@routes.get("/v1/tasks")
@requires(RESPONSES_READ)
async def list_tasks(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    only_known_query(request, "state", "model", "after", "limit")
    states = [s for value in request.query.getall("state", []) for s in value.split(",")]
    unknown = [s for s in states if s not in STATE_NAMES]
    if unknown:
        raise invalid(
            f"Unknown state {unknown[0]!r}; use one of {', '.join(sorted(STATE_NAMES))}.", "state"
        )
    rows, has_more = await ctx.store.tasks.list_tasks(
        TaskFilter(
            states=tuple(states),
            model=request.query.get("model") or None,
            client_id=principal.owner_filter(),
        ),
        after=request.query.get("after") or None,
        limit=query_int(request, "limit", 20, 1, 100),
    )
    data = [live_task_object(ctx, row, row["queue_position"]) for row in rows]
    return web.json_response(list_body(data, has_more))


@routes.get("/v1/tasks/{id}")
@requires(RESPONSES_READ)
async def get_task(request: web.Request, ctx: ServiceContext, principal: Principal) -> web.Response:
    row = await ctx.store.tasks.get(request.match_info["id"], principal.owner_filter())
    return web.json_response(live_task_object(ctx, row, await ctx.store.tasks.queue_position(row)))


def only_known_query(request: web.Request, *known: str) -> None:
    """A query parameter these pages do not read is refused, not ignored: a client paging the
    events with `starting_after` (the Responses stream's name) got page one again and again
    with `has_more: true`, and looped forever."""
    for name in request.query:
        if name not in known:
            names = ", ".join(f"`{k}`" for k in known)
            raise invalid(f"Unknown query parameter `{name}`: this list reads {names}.", name)


def live_task_object(ctx: ServiceContext, row: Any, queue_position: int | None) -> dict[str, Any]:
    """The task object with what only the runner knows while the task runs: how far its
    prompt has been read (or that it waits behind another's read), and its prompt's length
    before the store has it (while it runs or its cancel is under way)."""
    runner = ctx.runner
    if runner is None or row["state"] not in (TaskState.RUNNING, TaskState.CANCELLING):
        return task_object(row, queue_position)
    return task_object(
        row,
        queue_position,
        prompt_progress=runner.prompt_progress(row["id"]),
        input_tokens=runner.input_tokens_of(row["id"]),
    )


@routes.get("/v1/tasks/{id}/events")
@requires(RESPONSES_READ)
async def task_events(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.StreamResponse:
    """Every event, LMSP's own included: JSON pages, or SSE that replays then follows."""
    task_id = request.match_info["id"]
    await ctx.store.tasks.get(task_id, principal.owner_filter())
    only_known_query(request, "after", "limit")
    after = query_int(request, "after", 0, 0, 2**62)
    if "text/event-stream" in request.headers.get("Accept", ""):
        last_event_id = request.headers.get("Last-Event-ID", "").strip()
        if last_event_id:
            if not last_event_id.isdigit():
                raise invalid("Last-Event-ID must be a sequence number.", "Last-Event-ID")
            after = int(last_event_id)
        response, _ = await stream_events(request, ctx, task_id, after)
        return response
    limit = query_int(request, "limit", 100, 1, 1000)
    events = await ctx.store.tasks.events(task_id, after, limit + 1)
    return web.json_response(list_body(events[:limit], len(events) > limit))


@routes.post("/v1/tasks/{id}/cancel")
@requires(RESPONSES_WRITE)
async def cancel_task(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    """Cancel any task, whichever API created it (a chat completion has no response id to
    cancel at /v1/responses/{id}/cancel): the same transition, answering the task object."""
    task_id = request.match_info["id"]
    if ctx.downloads is not None:  # its log line names who cancelled (a running download)
        ctx.downloads.cancelling(task_id, _who(principal))
    row = await ctx.store.tasks.cancel(task_id, principal.owner_filter())
    return web.json_response(live_task_object(ctx, row, None))


def _who(principal: Principal) -> str:
    if principal.client_id is None:
        return "the owner"
    return f"client {principal.name} ({principal.client_id})"
