"""The aiohttp application: middlewares and every route module of the contract."""

from __future__ import annotations

from aiohttp import web

from lmsp_desktop.core.errors import not_found
from lmsp_desktop.core.service import (
    routes_clients,
    routes_models,
    routes_pairing,
    routes_responses,
    routes_system,
    routes_tasks,
)
from lmsp_desktop.core.service.context import CONTEXT, ServiceContext
from lmsp_desktop.core.service.middleware import UNKNOWN_ROUTE, auth, errors, guards


async def _unknown_route(request: web.Request) -> web.Response:
    raise not_found(
        f"There is no route {request.method} {request.path}. See /v1/openapi.json.",
        "unknown_route",
    )


def build_app(ctx: ServiceContext) -> web.Application:
    app = web.Application(
        middlewares=[errors, guards, auth], client_max_size=ctx.settings.max_body_bytes
    )
    app[CONTEXT] = ctx
    for module in (
        routes_system,
        routes_models,
        routes_responses,
        routes_tasks,
        routes_pairing,
        routes_clients,
    ):
        app.add_routes(module.routes)
    app.router.add_route("*", "/{tail:.*}", _unknown_route, name=UNKNOWN_ROUTE)
    routes_system.install_event_counter(app, ctx.store.tasks)
    return app
