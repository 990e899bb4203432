"""The aiohttp application: middlewares, the service's own routes and each API's (core/api/)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.anthropic import routes as anthropic_routes
from lmsp_desktop.core.api.chat import routes as chat_routes
from lmsp_desktop.core.api.completions import routes as completions_routes
from lmsp_desktop.core.api.embeddings import routes as embeddings_routes
from lmsp_desktop.core.api.ollama import routes as ollama_routes
from lmsp_desktop.core.api.responses import routes as responses_routes
from lmsp_desktop.core.service import (
    routes_clients,
    routes_downloads,
    routes_models,
    routes_pairing,
    routes_system,
    routes_tasks,
)
from lmsp_desktop.core.service.context import (
    API_PATHS,
    CONTEXT,
    UNMATCHED_ERRORS,
    ServiceContext,
    UnmatchedErrorBody,
)
from lmsp_desktop.core.service.middleware import cross_origin_headers, service
from lmsp_desktop.core.service.request_ids import request_id_headers


def build_app(ctx: ServiceContext) -> web.Application:
    app = web.Application(middlewares=[service], client_max_size=ctx.settings.max_body_bytes)
    app[CONTEXT] = ctx
    app.on_response_prepare.append(cross_origin_headers)
    app.on_response_prepare.append(request_id_headers)  # request-id, x-request-id
    documented: dict[str, Any] = {}
    unmatched: dict[str, UnmatchedErrorBody] = {}
    for module in (
        routes_system,
        routes_downloads,  # before routes_models: its /v1/models/{id} would match /pull
        routes_models,
        responses_routes,  # one line per API (core/api/)
        chat_routes,
        anthropic_routes,
        embeddings_routes,
        ollama_routes,
        completions_routes,
        routes_tasks,
        routes_pairing,
        routes_clients,
    ):
        app.add_routes(module.routes)
        # An API's own paths in /v1/openapi.json, declared beside its routes.
        documented.update(getattr(module, "OPENAPI_PATHS", {}))
        # The error shape of unmatched requests under an API's prefix (Ollama's `/api/`).
        unmatched.update(getattr(module, "UNMATCHED_ERRORS", {}))
    app[API_PATHS] = documented
    app[UNMATCHED_ERRORS] = unmatched
    routes_system.install_event_counter(app, ctx.store.tasks)
    return app
