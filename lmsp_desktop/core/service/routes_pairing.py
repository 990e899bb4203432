"""Pairing routes: start a device pairing, poll for its token, claim a one-time code."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lmsp_desktop.core.auth import parse_scopes
from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.scopes import DEFAULT_SCOPES
from lmsp_desktop.core.service.bodies import read_json
from lmsp_desktop.core.service.context import CONTEXT

routes = web.RouteTableDef()

# RFC 6749 5.1: answers carrying credentials must not be cached.
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def _manager(request: web.Request) -> PairingManager:
    ctx = request.app[CONTEXT]
    if ctx.pairing is None:  # the composition root normally sets it; never run without one
        ctx.pairing = PairingManager(ctx.store.db)
    return ctx.pairing


async def _object(request: web.Request) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    return body


def _string(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"`{name}` is required and must be a non-empty string.", name)
    return value


@routes.post("/v1/pairing")
async def start_pairing(request: web.Request) -> web.Response:
    body = await _object(request)
    name = _string(body, "client_name")
    scopes = parse_scopes(body.get("scopes", list(DEFAULT_SCOPES)), "scopes")
    answer = await _manager(request).start(name, scopes, request.remote)
    return web.json_response(answer, headers=NO_STORE)


@routes.post("/v1/pairing/claim")
async def claim(request: web.Request) -> web.Response:
    body = await _object(request)
    code = _string(body, "code")
    name = _string(body, "client_name")
    answer = await _manager(request).claim(code, name, request.remote)
    return web.json_response(answer, headers=NO_STORE)


@routes.post("/v1/pairing/{pairing_id}/token")
async def poll_token(request: web.Request) -> web.Response:
    body = await _object(request)
    secret = _string(body, "pairing_secret")
    answer = await _manager(request).poll(request.match_info["pairing_id"], secret, request.remote)
    return web.json_response(answer, headers=NO_STORE)
