"""Middlewares: errors as LMSP error bodies, Host/Origin guards, shutdown refusal, auth."""

from __future__ import annotations

import functools
import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.web_urldispatcher import MatchInfoError

from lmsp_desktop.core.api.failures import NO_RETRY
from lmsp_desktop.core.auth import authenticate
from lmsp_desktop.core.errors import LmspError, ShuttingDownError
from lmsp_desktop.core.service.context import CONTEXT, PRINCIPAL, ErrorBody, error_body_of

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PUBLIC = {
    *(("GET", "/"), ("HEAD", "/")),  # Ollama's "Ollama is running" (routes_system.root)
    ("GET", "/v1/health"),
    ("GET", "/v1/openapi.json"),
    ("POST", "/v1/pairing"),
    ("POST", "/v1/pairing/claim"),
}
PREFLIGHT = "Access-Control-Request-Method"  # what makes an OPTIONS a browser's CORS preflight
# The catch-all route: an unknown path answers 404 whether or not a token came with it.
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]", "::1"}
HTTP_ERRORS = {
    400: ("invalid_request_error", "invalid_request"),
    404: ("not_found_error", "unknown_route"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
}


def error_response(exc: LmspError, shape: ErrorBody = LmspError.body) -> web.Response:
    return web.json_response(shape(exc), status=exc.status)


async def _http_error(
    request: web.Request, exc: web.HTTPException, shape: ErrorBody
) -> web.StreamResponse:
    """aiohttp's own error (404, 405, 413, …) in the LMSP shape of the route's API."""
    kind, code = HTTP_ERRORS.get(exc.status, ("invalid_request_error", "http_error"))
    message = {
        405: f"{request.method} is not allowed on {request.path}.",
        413: "The request body is too large. Send a smaller body (limit: "
        f"{request.app[CONTEXT].settings.max_body_bytes} bytes).",
    }.get(exc.status, exc.reason)
    if exc.status == 404:
        message, shape = await unknown_route(request, shape)
    answer = error_response(LmspError(message, code=code, status=exc.status, type=kind), shape)
    if isinstance(exc, web.HTTPMethodNotAllowed):
        answer.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
    return answer


def _internal_error(request: web.Request, shape: ErrorBody) -> web.StreamResponse:
    """A bug's 500, while its exception is being handled: logged with its traceback."""
    reference = secrets.token_hex(4)
    log.exception("internal error %s on %s %s", reference, request.method, request.path)
    return error_response(
        LmspError(
            f"Internal error (reference {reference}). It has been logged; please report it.",
            code="internal_error",
            status=500,
            type="server_error",
        ),
        shape,
    )


# Routes whose clients take the service root as their base URL and add /v1 themselves
# (Anthropic's SDK, Claude Code's ANTHROPIC_BASE_URL); OpenAI's SDKs take one ending in /v1.
ROOT_BASED = ("/v1/messages",)


async def unknown_route(request: web.Request, shape: ErrorBody) -> tuple[str, ErrorBody]:
    """The 404 message for a path no route has, and its error shape. A path that would be a
    route with one `/v1` less (a base URL ending in /v1 given to a client that adds its own)
    or one more (a base URL without it given to a client that adds none) names the base URL
    to use instead, in the shape of that route's API: the one its client parses."""
    path, root = request.path, f"{request.scheme}://{request.host}"
    doubled = path.startswith("/v1/v1/")
    unknown = f"There is no route {request.method} {path}. See /v1/openapi.json.", shape
    if path.startswith("/v1/") and not doubled:
        return unknown  # under /v1 once: no base URL would make it a route
    meant = path.removeprefix("/v1") if doubled else "/v1" + path
    # Match info is a dict (empty for a path without variables): test its kind, not truth.
    match = await request.app.router.resolve(
        request.clone(rel_url=request.rel_url.with_path(meant))
    )
    if isinstance(match, MatchInfoError) and match.http_exception.status == 404:
        return unknown
    if doubled and meant.startswith(ROOT_BASED):
        advice = (
            "the client's base URL already ends in /v1 and the SDK adds another. Anthropic's "
            "SDK and Claude Code (ANTHROPIC_BASE_URL) add /v1 themselves: give them the "
            f"service root, {root}, without /v1."
        )
    elif doubled:
        advice = (
            "the client's base URL already ends in /v1 and the client adds another: drop one "
            f"/v1. A client that adds /v1 itself takes {root}; OpenAI's SDKs take {root}/v1."
        )
    elif meant.startswith(ROOT_BASED):
        advice = (
            f"the path is {meant}. Anthropic's SDK and Claude Code (ANTHROPIC_BASE_URL) take "
            f"the service root, {root}, and add /v1 themselves; a client that adds only "
            f"{path} takes {root}/v1."
        )
    else:
        advice = (
            "the client's base URL lacks /v1. OpenAI's SDKs and OpenAI-compatible clients "
            f"take a base URL ending in /v1: {root}/v1."
        )
    said = f"There is no route {request.method} {path}: {advice}"
    return said, getattr(match.handler, "error_body", None) or LmspError.body


# Both are asked on every request with the same few values (parsing an address each time
# was a measurable part of a create's cost, B1); the caches stay small either way.
@functools.lru_cache(maxsize=256)
def _host_allowed(host_header: str, bound_host: str, port: int) -> bool:
    host = host_header.lower()
    name, _, given_port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name:  # no port in the header
        name, given_port = host, ""
    if given_port and given_port != str(port):
        return False
    allowed = LOOPBACK_NAMES | {bound_host.lower(), f"[{bound_host.lower()}]"}
    return name in allowed


@functools.lru_cache(maxsize=16)
def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def _guard(request: web.Request) -> web.StreamResponse | None:
    """Refuse foreign Host headers (DNS rebinding) and browser Origins not allow-listed: an
    LmspError (421, 403), a CORS preflight's answer, or None to go on."""
    ctx = request.app[CONTEXT]
    bound_host = ctx.settings.host
    port = ctx.port if ctx.port is not None else ctx.settings.port
    if not _is_wildcard(bound_host) and not _host_allowed(request.host, bound_host, port):
        raise LmspError(
            f"Requests must address this service by its own name (got Host {request.host!r}). "
            "Use http://127.0.0.1 or http://localhost.",
            code="misdirected_request",
            status=421,
        )
    origin = request.headers.get("Origin")
    if origin is not None and origin not in ctx.settings.allowed_origins:
        raise LmspError(
            f"Browser pages from {origin} may not use this service. If you trust it, add it "
            "to the browser origins allowed (the window's Settings › Service, or start with "
            f"`--allow-origin {origin}`).",
            code="origin_not_allowed",
            status=403,
            type="permission_error",
        )
    if origin is not None and request.method == "OPTIONS" and PREFLIGHT in request.headers:
        # A browser asks before it sends a token cross-origin, and asks without the token:
        # answered here, before auth, and only for an allow-listed origin (checked above).
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
                "Access-Control-Allow-Headers": request.headers.get(
                    "Access-Control-Request-Headers", ""
                ),
                "Access-Control-Max-Age": "600",
            },
        )
    return None


async def cross_origin_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every answer to an allow-listed origin — errors and event streams too, which a
    middleware sees only after their headers are sent — the origin itself (never `*`), so
    the page may read it, with the headers SDKs read (request ids, Location, Retry-After)."""
    origin = request.headers.get("Origin")
    if origin is not None and origin in request.app[CONTEXT].settings.allowed_origins:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = "*"
        response.headers["Vary"] = "Origin"


def _credentials(request: web.Request) -> tuple[str | None, str]:
    """The bearer token as sent, and the header it came in: `Authorization: Bearer …`, or
    Anthropic's `x-api-key: …` (Claude Code's ANTHROPIC_API_KEY and earlier anthropic SDKs
    send our token that way; the SDK 2.16 sends `Authorization: Bearer`)."""
    header = request.headers.get("Authorization")
    if not (header or "").strip() and request.headers.get("x-api-key"):
        return f"Bearer {request.headers['x-api-key']}", "x-api-key"
    return header, "Authorization"


async def _authorize(request: web.Request) -> web.StreamResponse | None:
    """Authenticate every route except health, the OpenAPI document and pairing: the caller
    set on the request (None: go on), or its 401 answer; a POST while shutting down raises
    ShuttingDownError."""
    ctx = request.app[CONTEXT]
    if ctx.shutting_down and request.method == "POST":
        raise ShuttingDownError()
    public = (
        (request.method, request.path) in PUBLIC
        # No route matched (404) or not with this method (405): answer that, not 401.
        or isinstance(request.match_info, MatchInfoError)
        or (
            request.method == "POST"
            and request.path.startswith("/v1/pairing/")
            and request.path.endswith("/token")
        )
    )
    if not public:
        token, header = _credentials(request)
        try:
            request[PRINCIPAL] = await authenticate(ctx.store.db, token, request.remote, header)
        except LmspError as exc:
            if exc.status != 401:
                raise
            # The same token fails the same way on every try: without the header Claude
            # Code retried a revoked token's 401 for 3 minutes, silent (with it: one request).
            answer = error_response(exc, error_body_of(request))
            answer.headers.update(NO_RETRY)
            return answer
    return None


@web.middleware
async def service(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one middleware: the guards (_guard), then authentication (_authorize), then the
    route; LmspError → its status and body; aiohttp's own errors → the same shape; bugs →
    500 with a reference and the traceback in the log, never in the answer. Each in the
    shape of the route's API (errors_shaped). One layer, not three: each was a coroutine
    every request, and every create waiting for its commit, went through (B1)."""
    shape = error_body_of(request)
    try:
        answer = _guard(request)
        if answer is None:
            answer = await _authorize(request)
        if answer is None:
            answer = await handler(request)
        return answer
    except LmspError as exc:
        return error_response(exc, shape)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return await _http_error(request, exc, shape)
    except Exception:
        return _internal_error(request, shape)
