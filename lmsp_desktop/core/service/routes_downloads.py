"""`POST /v1/models/pull`: a model file from the Hugging Face hub, as a download task."""

from __future__ import annotations

import re
import time
from typing import Any

from aiohttp import web

from lmsp_desktop.core.api.creation import OWNER_KEYSPACE
from lmsp_desktop.core.auth import Principal
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.downloads.token import HUB_TOKEN_HEADER
from lmsp_desktop.core.errors import ShuttingDownError, invalid
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.scopes import ADMIN
from lmsp_desktop.core.service.bodies import read_json
from lmsp_desktop.core.service.context import ServiceContext, requires
from lmsp_desktop.core.storage.idempotency import (
    IdempotencyClaim,
    claim_key,
    release_key,
    request_digest,
    validate_key,
)

routes = web.RouteTableDef()
TOKEN_TEXT = re.compile(r"[!-~]{1,1024}")  # printable ASCII, as a token goes in a header
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
    # Checked before an Idempotency-Key is claimed: a refusal here holds no key.
    hub_token = request.headers.get(HUB_TOKEN_HEADER, "").strip() or None
    if hub_token is not None and not TOKEN_TEXT.fullmatch(hub_token):
        raise invalid(f"{HUB_TOKEN_HEADER} must be a Hugging Face token (hf_…).", None)
    task_id, claim = new_id("dl"), None
    key = request.headers.get("Idempotency-Key")
    if key is not None:
        # Claimed before the hub is asked: a retry after a lost answer replays the 202 even
        # when the hub is unreachable by then; one still being answered gets 409.
        claim = IdempotencyClaim(
            principal.client_id or OWNER_KEYSPACE,
            validate_key(key),
            request_digest("POST", request.path, body),
            ctx.settings.idempotency_ttl_s,
        )
        held = claim
        replay = await ctx.store.db.run(
            lambda conn: claim_key(conn, held, task_id, int(time.time()))
        )
        if replay is not None:
            return _accepted(replay.body, replayed=True)
    if hub_token and ctx.downloads is not None:
        # Lent before the task is committed: the manager may start it at the commit.
        ctx.downloads.lend_token(task_id, hub_token)
    try:
        task = await pull(
            ctx.store.tasks,
            repo,
            file or quant,
            revision=_text(body, "revision") or "main",
            on_restart=_text(body, "on_restart"),
            client_id=principal.client_id,
            task_id=task_id,
            claim=claim,
            token=hub_token,
        )
    except BaseException:
        if ctx.downloads is not None:
            ctx.downloads.forget_token(task_id)
        if claim is not None:
            await release_key(ctx.store.db, claim)
        raise
    if task["id"] != task_id and ctx.downloads is not None:
        ctx.downloads.forget_token(task_id)  # it joined the download already under way
    return _accepted(task)


def _accepted(task: dict[str, Any], replayed: bool = False) -> web.Response:
    headers = {"Location": f"/v1/tasks/{task['id']}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return web.json_response(task, status=202, headers=headers)
