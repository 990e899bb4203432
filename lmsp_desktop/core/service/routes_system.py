"""Health, the last recovery report, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

import gc
import time

from aiohttp import web

from lmsp_desktop import __version__
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.engines.prefix_cache import PrefixStats
from lmsp_desktop.core.errors import not_found
from lmsp_desktop.core.scopes import ADMIN
from lmsp_desktop.core.service.context import API_PATHS, CONTEXT, ServiceContext, requires
from lmsp_desktop.core.service.openapi import openapi_document
from lmsp_desktop.core.states import STATE_NAMES, TERMINAL
from lmsp_desktop.core.storage.recovery import last_report
from lmsp_desktop.core.storage.tasks import TaskStore
from lmsp_desktop.core.views import TaskChange

routes = web.RouteTableDef()


class EventCounter:
    """Events committed since this process started, for a Prometheus counter (which must
    never go down, so it cannot be a sum over what deletes and retention left in the store).

    Hears every commit through the task store's listeners and adds the growth of each task's
    last sequence number. A task first heard of mid-life (recovered at startup) counts from
    the event of that commit on.
    """

    def __init__(self) -> None:
        self.total = 0
        self._last_seq: dict[str, int] = {}

    def __call__(self, change: TaskChange) -> None:
        before = self._last_seq.get(change.task_id, change.last_seq - 1)
        self.total += max(0, change.last_seq - before)
        if change.state in TERMINAL:
            self._last_seq.pop(change.task_id, None)
        else:
            self._last_seq[change.task_id] = change.last_seq


EVENT_COUNTER = web.AppKey("lmsp_event_counter", EventCounter)


def install_event_counter(app: web.Application, tasks: TaskStore) -> None:
    """Count committed events while this application is up."""
    counter = EventCounter()
    tasks.listeners.append(counter)
    app[EVENT_COUNTER] = counter

    async def remove(_: web.Application) -> None:
        if counter in tasks.listeners:
            tasks.listeners.remove(counter)

    app.on_cleanup.append(remove)


@routes.get("/")  # and HEAD, public (middleware.PUBLIC)
async def root(request: web.Request) -> web.Response:
    """Ollama's answer at its root, which its CLI's connection check and Claude Code's start
    send: 200 `Ollama is running`, and nothing else (no version, no id: /v1/health has them)."""
    return web.Response(text="Ollama is running")


@routes.get("/v1/health")
async def health(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    return web.json_response(
        {
            "status": "shutting_down" if ctx.shutting_down else "ok",
            "version": __version__,
            "service_id": ctx.store.service_id,
            "uptime_s": int(time.time() - ctx.started_at),
        }
    )


@routes.get("/v1/recovery/last")
@requires(ADMIN)
async def recovery_last(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    # This startup's own report (possibly with no items) when the composition root shares
    # it; the store keeps only reports that recovered something, which may be older.
    current = ctx.recovery_report
    if current is not None:
        return web.json_response(current.as_json())
    report = await last_report(ctx.store.tasks)
    if report is None:
        raise not_found("No startup has recovered any task yet.", "no_recovery_report")
    return web.json_response(report)


@routes.get("/v1/metrics")
@requires(ADMIN)
async def metrics(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    counts = await ctx.store.tasks.counts()
    events_stored, tokens_stored = await ctx.store.tasks.stored_totals()
    lines = [
        "# HELP lmsp_tasks Tasks in the store by state.",
        "# TYPE lmsp_tasks gauge",
        *(f'lmsp_tasks{{state="{s}"}} {counts.get(s, 0)}' for s in STATE_NAMES),
        "# HELP lmsp_queue_depth Tasks waiting in a queue.",
        "# TYPE lmsp_queue_depth gauge",
        f"lmsp_queue_depth {counts.get('queued', 0)}",
        "# HELP lmsp_events_written_total Task events committed since the service started.",
        "# TYPE lmsp_events_written_total counter",
        f"lmsp_events_written_total {request.app[EVENT_COUNTER].total}",
        "# HELP lmsp_events_stored Events in the task logs kept in the store.",
        "# TYPE lmsp_events_stored gauge",
        f"lmsp_events_stored {events_stored}",
        "# HELP lmsp_output_tokens_stored Output tokens of the responses kept in the store.",
        "# TYPE lmsp_output_tokens_stored gauge",
        f"lmsp_output_tokens_stored {tokens_stored}",
        *_prefix_cache_lines(ctx),
        *_collector_lines(),
    ]
    return web.Response(
        text="\n".join(lines) + "\n",
        content_type="text/plain",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def _prefix_cache_lines(ctx: ServiceContext) -> list[str]:
    """The engines' prompt-prefix cache: how often a prompt started like a cached one and
    how many prompt tokens that saved (counted since the service started)."""
    stats = ctx.runner.prefix_cache_stats() if ctx.runner else PrefixStats()
    figures = [
        ("lookups", "Prompts looked up in the prompt-prefix cache.", stats.lookups),
        ("hits", "Prompts that reused 16+ cached tokens.", stats.hits),
        ("tokens_reused", "Prompt tokens taken from the cache.", stats.tokens_reused),
        ("tokens_evaluated", "Prompt tokens evaluated (not cached).", stats.tokens_evaluated),
    ]
    lines: list[str] = []
    for name, help_text, value in figures:
        metric = f"lmsp_prefix_cache_{name}_total"
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter", f"{metric} {value}"]
    return lines


def _collector_lines() -> list[str]:
    """Python's cyclic garbage collector (Prometheus' Python client calls it python_gc_…): its
    passes pause the service (a full one walks the heap), so they are worth watching."""
    lines = [
        "# HELP lmsp_gc_collections_total Passes of the cyclic garbage collector.",
        "# TYPE lmsp_gc_collections_total counter",
    ]
    for generation, stats in enumerate(gc.get_stats()):
        lines.append(
            f'lmsp_gc_collections_total{{generation="{generation}"}} {stats["collections"]}'
        )
    return lines


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    document = openapi_document(request.app[CONTEXT].url)
    document["paths"].update(request.app[API_PATHS])
    return web.json_response(document)
