"""Paired clients and their bearer tokens: only a hash and a display prefix are ever stored."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from lmsp_desktop.core.errors import invalid, not_found
from lmsp_desktop.core.ids import new_id, new_token, token_display_prefix, token_hash

if TYPE_CHECKING:
    from lmsp_desktop.core.storage.db import Database

MAX_NAME_LENGTH = 100

COLUMNS = "id, name, token_prefix, scopes, created_at, last_seen_at, last_seen_addr, revoked_at"

# How long a verified token's client row is trusted without reading it again. Revoking a
# client or changing its scopes through this module forgets the rows at once; only a change
# another process makes to the same file (`lmsp-desktop clients revoke` while `serve` runs)
# waits for this. Reading the row on every request was a hop to the reader thread per
# request (B1: creates through HTTP).
VERIFIED_FOR_S = 1.0


@dataclass
class _Verified:
    """One open database's verified tokens: token hash → (its client's row, when read)."""

    rows: dict[str, tuple[sqlite3.Row, float]] = field(default_factory=dict)
    generation: int = 0  # moves on at every forget: a read begun before it is not kept


_verified: WeakKeyDictionary[Database, _Verified] = WeakKeyDictionary()
_clock = time.monotonic


def clean_name(name: object, param: str) -> str:
    """A client's display name: a non-empty single line of at most 100 characters."""
    if not isinstance(name, str) or not name.strip():
        raise invalid(f"Give the client a name in `{param}` (a non-empty string).", param)
    cleaned = " ".join(name.split())  # no newlines or tabs sneaking into tables and logs
    if len(cleaned) > MAX_NAME_LENGTH:
        raise invalid(f"`{param}` is too long: use at most {MAX_NAME_LENGTH} characters.", param)
    return cleaned


def client_dict(row: sqlite3.Row) -> dict[str, Any]:
    """The API form of a `clients` row (never the token hash)."""
    return {
        "id": row["id"],
        "object": "client",
        "name": row["name"],
        "scopes": sorted(json.loads(row["scopes"])),
        "created_at": row["created_at"],
        "last_seen_at": row["last_seen_at"],
        "last_seen_addr": row["last_seen_addr"],
        "token_prefix": row["token_prefix"],
        "revoked": row["revoked_at"] is not None,
        "revoked_at": row["revoked_at"],
    }


def insert_client(
    conn: sqlite3.Connection, name: str, scopes: frozenset[str]
) -> tuple[dict[str, Any], str]:
    """Create a client inside the caller's transaction (pairing issues its token atomically)."""
    token = new_token()
    client_id = new_id("client")
    created_at = int(time.time())
    conn.execute(
        "INSERT INTO clients (id, name, token_hash, token_prefix, scopes, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (
            client_id,
            name,
            token_hash(token),
            token_display_prefix(token),
            json.dumps(sorted(scopes)),
            created_at,
        ),
    )
    client = {
        "id": client_id,
        "object": "client",
        "name": name,
        "scopes": sorted(scopes),
        "created_at": created_at,
        "last_seen_at": None,
        "last_seen_addr": None,
        "token_prefix": token_display_prefix(token),
        "revoked": False,
        "revoked_at": None,
    }
    return client, token


async def client_by_token_hash(db: Database, digest: str) -> sqlite3.Row | None:
    """The `clients` row holding this token hash (revoked or not), or None: a live client's
    row from memory while younger than VERIFIED_FOR_S, else read."""
    verified = _verified.get(db)
    if verified is None:  # not setdefault: that built a _Verified on every request
        verified = _verified.setdefault(db, _Verified())
    now = _clock()
    hit = verified.rows.get(digest)
    if hit is not None and now - hit[1] < VERIFIED_FOR_S:
        return hit[0]
    generation = verified.generation
    row = await db.fetchone(
        "SELECT id, name, token_hash, scopes, last_seen_at, last_seen_addr, revoked_at"
        " FROM clients WHERE token_hash=?",
        (digest,),
    )
    if row is not None and row["revoked_at"] is None and verified.generation == generation:
        verified.rows[digest] = (row, now)
    return row


def _forget_verified(db: Database) -> None:
    """After a client's scopes or revocation changed: every token is read again."""
    verified = _verified.get(db)
    if verified is not None:
        verified.rows.clear()
        verified.generation += 1


async def create_client(
    db: Database, name: str, scopes: frozenset[str]
) -> tuple[dict[str, Any], str]:
    """A new client and its plaintext token, which the caller shows once and forgets."""
    name = clean_name(name, "name")
    if not scopes:
        raise invalid("Give the client at least one scope.", "scopes", code="invalid_scope")
    return await db.run(lambda conn: insert_client(conn, name, scopes))


async def get_client(db: Database, client_id: str) -> dict[str, Any]:
    row = await db.fetchone(f"SELECT {COLUMNS} FROM clients WHERE id=?", (client_id,))
    if row is None:
        raise _unknown(client_id)
    return client_dict(row)


async def list_clients(db: Database, *, include_revoked: bool = True) -> list[dict[str, Any]]:
    """All clients, newest first (revoked ones too unless asked not to)."""
    where = "" if include_revoked else " WHERE revoked_at IS NULL"
    rows = await db.fetchall(
        f"SELECT {COLUMNS} FROM clients{where} ORDER BY created_at DESC, rowid DESC"
    )
    return [client_dict(row) for row in rows]


async def revoke_client(db: Database, client_id: str) -> dict[str, Any]:
    """Revoke a client's token; the next request with it is refused."""
    await _update_one(
        db,
        client_id,
        "UPDATE clients SET revoked_at=COALESCE(revoked_at, ?) WHERE id=?",
        (int(time.time()), client_id),
    )
    return await get_client(db, client_id)


async def set_scopes(db: Database, client_id: str, scopes: frozenset[str]) -> dict[str, Any]:
    """Change what a client may do (the GUI's scope editing); takes effect at its next request."""
    if not scopes:
        raise invalid(
            "Keep at least one scope, or revoke the client instead.",
            "scopes",
            code="invalid_scope",
        )
    await _update_one(
        db,
        client_id,
        "UPDATE clients SET scopes=? WHERE id=?",
        (json.dumps(sorted(scopes)), client_id),
    )
    return await get_client(db, client_id)


async def touch_client(db: Database, client_id: str, at: int, addr: str | None) -> None:
    """Record when and from where a client was last seen."""
    await db.run(
        lambda conn: conn.execute(
            "UPDATE clients SET last_seen_at=?, last_seen_addr=? WHERE id=?",
            (at, addr, client_id),
        ).close()
    )


async def _update_one(db: Database, client_id: str, sql: str, params: tuple[Any, ...]) -> None:
    """Run an UPDATE of one client; 404 when there is no such client."""

    def work(conn: sqlite3.Connection) -> int:
        return conn.execute(sql, params).rowcount

    changed = await db.run(work)
    _forget_verified(db)  # only after the commit: a read in between must not be kept
    if changed == 0:
        raise _unknown(client_id)


def _unknown(client_id: str) -> Exception:
    return not_found(
        f"No client has the id {client_id!r}. List clients with `GET /v1/clients` or "
        "`lmsp-desktop clients list`.",
        code="client_not_found",
    )
