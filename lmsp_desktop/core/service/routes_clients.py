"""Client management routes (admin): list paired clients, revoke one."""

from __future__ import annotations

from aiohttp import web

from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.scopes import ADMIN
from lmsp_desktop.core.service.bodies import list_body, query_int
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.storage.clients import list_clients, revoke_client

routes = web.RouteTableDef()


@routes.get("/v1/clients")
@requires(ADMIN)
async def clients(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    limit = query_int(request, "limit", 100, 1, 1000)
    after = request.query.get("after")
    data = await list_clients(ctx.store.db)
    if after:
        ids = [client["id"] for client in data]
        if after not in ids:
            raise invalid(f"`after` names no listed client ({after!r}).", "after")
        data = data[ids.index(after) + 1 :]
    return web.json_response(list_body(data[:limit], len(data) > limit))


@routes.delete("/v1/clients/{client_id}")
@requires(ADMIN)
async def revoke(request: web.Request, ctx: ServiceContext, _: Principal) -> web.Response:
    client = await revoke_client(ctx.store.db, request.match_info["client_id"])
    return web.json_response({"id": client["id"], "object": "client", "deleted": True})
