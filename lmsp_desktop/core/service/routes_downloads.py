"""`POST /v1/models/pull`: a model file from the Hugging Face hub, as a download task."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.errors import ShuttingDownError, invalid
from lmsp_desktop.core.scopes import ADMIN
from lmsp_desktop.core.service.bodies import read_json
from lmsp_desktop.core.service.context import ServiceContext, requires

routes = web.RouteTableDef()
FIELDS = {"repo", "file", "quant", "revision", "on_restart"}


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise invalid(f"{name} must be a non-empty string.", name)
    return value


@routes.post("/v1/models/pull")
@requires(ADMIN)
async def pull_model(
    request: web.Request, ctx: ServiceContext, principal: Principal
) -> web.Response:
    """202 with the task object (kind `download`) once the task is committed; its events at
    /v1/tasks/{id}/events carry bytes_done and bytes_total."""
    if ctx.shutting_down:
        raise ShuttingDownError()
    body = await read_json(request)
    if not isinstance(body, dict):
        raise invalid('The body must be a JSON object such as {"repo": "org/name"}.', None)
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise invalid(f"Unknown field {unknown[0]!r}; use {', '.join(sorted(FIELDS))}.", unknown[0])
    repo = _text(body, "repo")
    if repo is None:
        raise invalid("repo is required: the hub repo id, such as org/name-GGUF.", "repo")
    file, quant = _text(body, "file"), _text(body, "quant")
    if file and quant:
        raise invalid("Give file or quant, not both.", "quant")
    task = await pull(
        ctx.store.tasks,
        repo,
        file or quant,
        revision=_text(body, "revision") or "main",
        on_restart=_text(body, "on_restart"),
        client_id=principal.client_id,
    )
    return web.json_response(task, status=202, headers={"Location": f"/v1/tasks/{task['id']}"})
