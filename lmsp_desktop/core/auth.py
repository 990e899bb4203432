"""Who is calling: bearer tokens checked against their stored hash, scopes, the owner."""

from __future__ import annotations

import hmac
import json
import logging
import re
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.ids import TOKEN_PREFIX, token_hash
from lmsp_desktop.core.scopes import ADMIN, DEFAULT_SCOPES
from lmsp_desktop.core.scopes import SCOPES as SCOPES  # re-exported: older imports use auth's
from lmsp_desktop.core.storage.clients import client_by_token_hash, touch_client

if TYPE_CHECKING:
    from lmsp_desktop.core.storage.db import Database

log = logging.getLogger(__name__)


# Writing last_seen on every request would turn each read into a write transaction.
LAST_SEEN_EVERY_S = 30.0

_TOKEN_SHAPE = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_\-]{16,128}")
_HOW_TO_PAIR = (
    "Pair this client with the service (POST /v1/pairing, or `Pair a client…` in the "
    "desktop app), or create a token with `lmsp-desktop token create --name NAME --scopes "
    f"{','.join(DEFAULT_SCOPES)}`, then send it as "
    "`Authorization: Bearer lmsp_…`."
)


@dataclass(frozen=True)
class Principal:
    """The caller of a request: a paired client, or the owner (GUI in-process, local CLI)."""

    client_id: str | None  # None means the owner
    name: str
    scopes: frozenset[str]

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.scopes

    def require(self, scope: str) -> None:
        """Refuse with 403 unless this caller holds `scope` (admin holds every scope)."""
        if self.is_admin or scope in self.scopes:
            return
        raise LmspError(
            f"This client ({self.name}) lacks the scope `{scope}`. Pair again asking for "
            f"`{scope}`, or ask the service's owner for a token that holds it (`lmsp-desktop "
            f"token create --name NAME --scopes {scope}` where the service runs, or the "
            "desktop app's Clients page).",
            code="insufficient_scope",
            status=403,
            type="permission_error",
        )

    def owner_filter(self) -> str | None:
        """The client id whose tasks this caller may see, or None to see everyone's."""
        return None if self.is_admin else self.client_id


OWNER = Principal(client_id=None, name="owner", scopes=frozenset(SCOPES))


def parse_scopes(value: str | list[str], param: str) -> frozenset[str]:
    """Scopes from a list, or a string separated by spaces or commas; 400 on unknown ones."""
    if isinstance(value, str):
        items = value.replace(",", " ").split()
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = [item.strip() for item in value]
    else:
        raise invalid(
            f"`{param}` must be a list of scope names or a string of them separated by "
            f"spaces, from: {', '.join(SCOPES)}.",
            param,
            code="invalid_scope",
        )
    unknown = sorted({item for item in items if item not in SCOPES})
    if unknown:
        raise invalid(
            f"Unknown scope{'s' if len(unknown) > 1 else ''} in `{param}`: "
            f"{', '.join(unknown)}. Use any of: {', '.join(SCOPES)}.",
            param,
            code="invalid_scope",
        )
    if not items:
        raise invalid(
            f"`{param}` is empty: ask for at least one of {', '.join(SCOPES)}.",
            param,
            code="invalid_scope",
        )
    return frozenset(items)


def _unauthorized(code: str, message: str) -> LmspError:
    return LmspError(message, code=code, status=401, type="authentication_error")


def _now() -> float:
    return time.time()


# client id → when this process last wrote (or decided not to write) its last_seen.
_last_seen_checked: dict[str, float] = {}


async def authenticate(
    db: Database, authorization: str | None, peer: str | None, header: str = "Authorization"
) -> Principal:
    """The Principal of an `Authorization: Bearer lmsp_…` header, or a 401 LmspError.
    `header` is where the token came (`x-api-key` as Anthropic's clients send it, given here
    as `Bearer …`): a malformed one is refused naming that header, never echoing the token."""
    digest = _digests.get(authorization) if authorization else None
    if digest is None:
        digest = _digest_of(authorization, header)
    row = await client_by_token_hash(db, digest)
    # The lookup is by a hash of 256 random bits; the constant-time comparison guards the
    # last step anyway, so no timing difference depends on how much of a guess was right.
    if row is None or not hmac.compare_digest(str(row["token_hash"]), digest):
        raise _unauthorized(
            "invalid_token", "This token is not known to the service. " + _HOW_TO_PAIR
        )
    if row["revoked_at"] is not None:
        raise _unauthorized(
            "invalid_token",
            "This token was revoked by the service's owner. " + _HOW_TO_PAIR,
        )
    principal = _principal_of(row)
    await _note_seen(db, principal.client_id or "", row["last_seen_at"], peer)
    return principal


# The hash of the token in each well-formed Authorization value seen lately, by the value as
# sent: a client sends the same one on every request, and its shape check and SHA-256 were
# a fiftieth of a create (B1). The hash is a function of the value, so a hit answers as the
# check and hash would; the row it names is still looked up (revoked, unknown) per request.
# Only well-formed values are kept, at most MAX_DIGESTS (then forgotten all at once): the
# process holds each token while it reads its request anyway.
_digests: dict[str, str] = {}
MAX_DIGESTS = 256


def _digest_of(authorization: str | None, header: str) -> str:
    """The token hash of a well-formed `Bearer lmsp_…` value, kept in _digests; else a 401
    naming the header it came in, never echoing the token."""
    if not authorization or not authorization.strip():
        raise _unauthorized("missing_token", "This request needs a bearer token. " + _HOW_TO_PAIR)
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not _TOKEN_SHAPE.fullmatch(token):
        shape = (
            "`Bearer lmsp_…` with a token"
            if header.lower() == "authorization"
            else "an `lmsp_…` token"
        )
        raise _unauthorized(
            "invalid_token",
            f"The {header} header is not {shape} from this service. " + _HOW_TO_PAIR,
        )
    digest = token_hash(token)
    if len(_digests) >= MAX_DIGESTS:
        _digests.clear()
    _digests[authorization] = digest
    return digest


# The Principal made from each verified row, by the row object itself: clients.py keeps a
# live row at most VERIFIED_FOR_S and reads it anew after any revoke or scope change, so a
# new row object is a new Principal (B1: the scopes' JSON parsed per request).
_principals: dict[str, tuple[sqlite3.Row, Principal]] = {}
MAX_PRINCIPALS = 1024


def _principal_of(row: sqlite3.Row) -> Principal:
    client_id = str(row["id"])
    kept = _principals.get(client_id)
    if kept is not None and kept[0] is row:
        return kept[1]
    principal = Principal(
        client_id=client_id, name=str(row["name"]), scopes=frozenset(json.loads(row["scopes"]))
    )
    if len(_principals) >= MAX_PRINCIPALS:
        _principals.clear()
    _principals[client_id] = (row, principal)
    return principal


async def _note_seen(db: Database, client_id: str, stored_at: int | None, peer: str | None) -> None:
    now = _now()
    if stored_at is not None and now - stored_at < LAST_SEEN_EVERY_S:
        return
    if now - _last_seen_checked.get(client_id, float("-inf")) < LAST_SEEN_EVERY_S:
        return  # a write is already under way or just done (the reader may lag behind it)
    _last_seen_checked[client_id] = now
    try:
        await touch_client(db, client_id, int(now), peer)
    except LmspError as exc:  # a busy database must not turn a good token into an error
        log.warning("could not record when client %s was last seen: %s", client_id, exc.message)
