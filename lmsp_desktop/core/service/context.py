"""What every route handler reaches: the running core's parts, the caller, and the one way a
route declares the scope it needs (`@requires(scope)`, in the manner of Starlette's)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web
from aiohttp.web_urldispatcher import MatchInfoError

from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import LmspError

if TYPE_CHECKING:
    from lmsp_desktop.core.config import Settings
    from lmsp_desktop.core.context_window import TokenCounter
    from lmsp_desktop.core.downloads.manager import DownloadManager
    from lmsp_desktop.core.follow import EventFollower
    from lmsp_desktop.core.models.fitting import ModelFitter
    from lmsp_desktop.core.models.registry import ModelRegistry
    from lmsp_desktop.core.pairing import PairingManager
    from lmsp_desktop.core.runner import Runner
    from lmsp_desktop.core.storage.store import Store
    from lmsp_desktop.core.upstreams.catalog import UpstreamCatalog
    from lmsp_desktop.core.views import RecoveryReport


@dataclass
class ServiceContext:
    """The parts of the running core the HTTP routes use (set up by the composition root)."""

    store: Store
    settings: Settings
    registry: ModelRegistry
    follower: EventFollower
    runner: Runner | None = None  # without one, every model shows as unloaded
    pairing: PairingManager | None = None  # made on first use when not given
    upstreams: UpstreamCatalog | None = None  # other services whose models run here
    # Counts prompt tokens at create time (a request that cannot fit is refused with 400).
    tokens: TokenCounter | None = None
    # Sizes local model loads to the memory available (507 before a load that cannot fit).
    fitter: ModelFitter | None = None
    # Runs the download tasks (a pull lends it its caller's hub token; a cancel says who).
    downloads: DownloadManager | None = None
    # This startup's own recovery report (possibly with no items), for /v1/recovery/last.
    recovery_report: RecoveryReport | None = None
    started_at: float = 0.0
    url: str = ""
    # The port actually bound (the settings may say 0: any free port).
    port: int | None = None
    shutting_down: bool = False
    # Drain: new responses are refused with 503 while accepted ones run to the end.
    paused: bool = False


CONTEXT = web.AppKey("lmsp_context", ServiceContext)
# OpenAPI paths that API folders declare beside their routes (core/api/*/routes.py).
API_PATHS = web.AppKey("lmsp_api_paths", dict[str, Any])
# The authenticated caller of a request, set by the auth middleware.
PRINCIPAL = web.RequestKey("lmsp_principal", Principal)

R = TypeVar("R", bound=web.StreamResponse)
ScopedHandler = Callable[[web.Request, ServiceContext, Principal], Awaitable[R]]


def requires(scope: str) -> Callable[[ScopedHandler[R]], Callable[[web.Request], Awaitable[R]]]:
    """Declare the scope a route needs, once: the caller is refused with 403 unless it holds
    `scope`; the handler then gets the context and the caller besides the request.

        @routes.get("/v1/models")
        @requires(MODELS_READ)
        async def list_models(request, ctx, caller): ...
    """

    def decorate(handler: ScopedHandler[R]) -> Callable[[web.Request], Awaitable[R]]:
        @functools.wraps(handler)
        async def checked(request: web.Request) -> R:
            caller = request[PRINCIPAL]
            caller.require(scope)
            return await handler(request, request.app[CONTEXT], caller)

        checked.required_scope = scope  # type: ignore[attr-defined]
        return checked

    return decorate


# An error as one API's clients expect its body (OpenAI's shape, LmspError.body, otherwise).
ErrorBody = Callable[[LmspError], dict[str, Any]]
H = TypeVar("H", bound=Callable[..., Any])


def errors_shaped(body: ErrorBody) -> Callable[[H], H]:
    """Declare the shape of a route's error bodies, all of them (a refused token, a bad
    field, a failed task), for APIs whose clients parse another shape than OpenAI's:

        @routes.post("/v1/messages")
        @errors_shaped(anthropic_error)
        @requires(RESPONSES_WRITE)
        async def create_message(request, ctx, caller): ...
    """

    def mark(handler: H) -> H:
        handler.error_body = body  # type: ignore[attr-defined]
        return handler

    return mark


# The error shape of a request that no route matched (an unknown path, or a known one with
# another method) under an API's own path prefix: that API's clients read its shape whatever
# the path. By prefix, the shape for such a request; an API folder declares its own beside its
# routes (`UNMATCHED_ERRORS`, Ollama's for `/api/`), app.py collects them.
UnmatchedErrorBody = Callable[[web.Request], ErrorBody]
UNMATCHED_ERRORS = web.AppKey("lmsp_unmatched_errors", dict[str, UnmatchedErrorBody])


def error_body_of(request: web.Request) -> ErrorBody:
    """The error shape of the route a request matched (errors_shaped); for a request no route
    matched, that of the API whose path prefix it is under (UNMATCHED_ERRORS); else OpenAI's."""
    shaped: ErrorBody | None = getattr(request.match_info.handler, "error_body", None)
    if shaped is not None:
        return shaped
    if isinstance(request.match_info, MatchInfoError):
        for prefix, shape_for in request.app.get(UNMATCHED_ERRORS, {}).items():
            if request.path.startswith(prefix):
                return shape_for(request)
    return LmspError.body
