"""How a command reaches the service running on its data directory: its URL, an admin token,
HTTP calls. A command whose work belongs to the running service (a pull, a verify, a rescan)
asks it over HTTP instead of changing the store under it.

The token: `LMSP_TOKEN` (admin scope) when set, else a one-off admin client that the command
revokes when it ends.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import sqlite3
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.ids import token_hash
from lmsp_desktop.core.storage.clients import create_client, revoke_client
from lmsp_desktop.core.storage.store import Store


def service_url(data_dir: Path) -> str:
    """The URL the service holding `data_dir` announced (its service.json)."""
    try:
        return str(json.loads((data_dir / "service.json").read_text())["url"]).rstrip("/")
    except (OSError, ValueError, KeyError, TypeError):
        raise LmspError(
            f"Another lmsp-desktop command is using {data_dir} and no service answers there. "
            "Try again when it has ended.",
            code="data_dir_in_use",
            status=503,
        ) from None


@contextlib.asynccontextmanager
async def admin_token(data_dir: Path, name: str) -> AsyncIterator[str]:
    """`LMSP_TOKEN`, else a new admin client's token, revoked on the way out."""
    token = os.environ.get("LMSP_TOKEN")
    if token:
        yield token
        return
    store = Store(data_dir)
    await store.open()
    try:
        client, token = await create_client(store.db, name, frozenset({"admin"}))
    finally:
        await store.close()
    try:
        yield token
    finally:
        store = Store(data_dir)
        await store.open()
        try:
            await revoke_client(store.db, client["id"])
        finally:
            await store.close()


def token_client(data_dir: Path) -> tuple[str, frozenset[str]] | None:
    """The name and scopes of the client whose token LMSP_TOKEN is, read (read-only) from
    the data directory's database; None when LMSP_TOKEN is unset or names no live client
    (the service then refuses it and says why)."""
    token = os.environ.get("LMSP_TOKEN")
    if not token:
        return None
    try:
        uri = f"{database_path(data_dir).resolve().as_uri()}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=5)) as conn:
            row = conn.execute(
                "SELECT name, scopes FROM clients WHERE token_hash=? AND revoked_at IS NULL",
                (token_hash(token.strip()),),
            ).fetchone()
        return (str(row[0]), frozenset(json.loads(row[1]))) if row else None
    except (sqlite3.Error, OSError, ValueError):
        return None


def refusal(body: Any) -> str:
    """The service's refusal as a command says it. A refused token or a missing scope can only
    be LMSP_TOKEN's (the command's own token is admin), and the fix is in this shell, not on
    a window's Clients page a headless server does not have."""
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    message = str(error.get("message") or "The service refused the request.")
    if error.get("code") == "invalid_token" and os.environ.get("LMSP_TOKEN"):
        # Not the pairing advice of a client: the token is this shell's, the fix too.
        return (
            "LMSP_TOKEN is not a token of this service (revoked, or another service's): unset "
            "it to use the owner's, or create one with `lmsp-desktop token create`."
        )
    if error.get("code") == "insufficient_scope" and os.environ.get("LMSP_TOKEN"):
        lacks = message.split(". ")[0].rstrip(".")
        return (
            f"{lacks}: LMSP_TOKEN is that client's token. Unset LMSP_TOKEN (the command then "
            "makes an admin token of its own for its run), or set it to an admin token from "
            "`lmsp-desktop token create --name NAME --scopes admin` (`lmsp-desktop clients "
            "list` shows the clients and their scopes)."
        )
    return message


def call(
    url: str,
    token: str,
    method: str = "GET",
    body: Any = None,
    timeout: float = 120,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """(status, JSON body) of one request; an HTTP error status is an answer, not raised."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        **(headers or {}),
    }
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null")
    # A service killed while answering resets the connection or ends it mid-answer (not a
    # URLError): the same "does not answer" (a traceback in the CI's kill -9 test).
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise LmspError(
            f"The service at {url.split('/v1/')[0]} does not answer ({reason}). If it is "
            "still starting, try again in a moment.",
            code="service_unavailable",
            status=503,
        ) from None
