"""Health, the last recovery report, Prometheus metrics and the OpenAPI document."""

from __future__ import annotations

import time

from aiohttp import web

from lmsp_desktop import __version__
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import not_found
from lmsp_desktop.core.service.context import CONTEXT, PRINCIPAL
from lmsp_desktop.core.service.openapi import openapi_document
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage.recovery import last_report

routes = web.RouteTableDef()


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
async def recovery_last(request: web.Request) -> web.Response:
    principal: Principal = request[PRINCIPAL]
    principal.require("admin")
    ctx = request.app[CONTEXT]
    # This startup's own report (possibly with no items) when the composition root shares
    # it; the store keeps only reports that recovered something, which may be older.
    current = ctx.extras.get("recovery_report")
    if current is not None:
        return web.json_response(current.as_json())
    report = await last_report(ctx.store.tasks)
    if report is None:
        raise not_found("No startup has recovered any task yet.", "no_recovery_report")
    return web.json_response(report)


@routes.get("/v1/metrics")
async def metrics(request: web.Request) -> web.Response:
    principal: Principal = request[PRINCIPAL]
    principal.require("admin")
    ctx = request.app[CONTEXT]
    counts = await ctx.store.tasks.counts()
    totals = await ctx.store.db.fetchone(
        "SELECT COALESCE(SUM(last_seq), 0) AS events, "
        "(SELECT COALESCE(SUM(output_tokens), 0) FROM responses) AS tokens FROM tasks"
    )
    lines = [
        "# HELP lmsp_tasks Tasks in the store by state.",
        "# TYPE lmsp_tasks gauge",
        *(f'lmsp_tasks{{state="{s.value}"}} {counts.get(s.value, 0)}' for s in TaskState),
        "# HELP lmsp_queue_depth Tasks waiting in a queue.",
        "# TYPE lmsp_queue_depth gauge",
        f"lmsp_queue_depth {counts.get('queued', 0)}",
        "# HELP lmsp_events_written_total Events in the task logs kept in the store.",
        "# TYPE lmsp_events_written_total counter",
        f"lmsp_events_written_total {totals['events'] if totals else 0}",
        "# HELP lmsp_tokens_generated_total Output tokens of the responses kept in the store.",
        "# TYPE lmsp_tokens_generated_total counter",
        f"lmsp_tokens_generated_total {totals['tokens'] if totals else 0}",
    ]
    return web.Response(
        text="\n".join(lines) + "\n",
        content_type="text/plain",
        headers={"X-Content-Type-Options": "nosniff"},
    )


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document(request.app[CONTEXT].url))
