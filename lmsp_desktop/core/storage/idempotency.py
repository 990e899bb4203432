"""Idempotency keys (LMSP_API.md "Idempotency"): claimed in the transaction of the task.

Same key, same body: the stored answer is replayed. Same key, other body: 422. Same key while
the first request is still being answered: 409. Keys are scoped to the client.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmsp_desktop.core.errors import LmspError, conflict

if TYPE_CHECKING:
    from lmsp_desktop.core.storage.db import Database

DEFAULT_TTL_S = 24 * 3600


@dataclass(frozen=True)
class IdempotencyClaim:
    """A request's key: who sent it, the key, and the digest of method, path and body."""

    client_id: str
    key: str
    digest: str
    ttl_s: int = DEFAULT_TTL_S


def request_digest(method: str, path: str, body: Any) -> str:
    # ensure_ascii keeps it total: a JSON body may carry a lone surrogate escape ("\ud800"),
    # which has no UTF-8 encoding; escaped, every body has exactly one canonical form.
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(f"{method}\n{path}\n{canonical}".encode()).hexdigest()


def validate_key(key: str) -> str:
    if not 1 <= len(key) <= 255 or not all(0x20 < ord(ch) < 0x7F for ch in key):
        raise LmspError(
            "Idempotency-Key must be 1–255 printable ASCII characters without spaces.",
            code="invalid_idempotency_key",
            param="Idempotency-Key",
        )
    return key


@dataclass(frozen=True)
class Replay:
    """The stored answer of a key used before: its task, status and body."""

    task_id: str
    status: int
    body: dict[str, Any]


def claim_key(
    conn: sqlite3.Connection, claim: IdempotencyClaim, task_id: str, now: int
) -> Replay | None:
    """Inside the create transaction: replay, refuse, or claim the key for `task_id`."""
    row = conn.execute(
        "SELECT request_digest, state, status, body, task_id FROM idempotency_keys "
        "WHERE client_id=? AND key=? AND expires_at>?",
        (claim.client_id, claim.key, now),
    ).fetchone()
    if row is not None:
        if row["request_digest"] != claim.digest:
            raise LmspError(
                "This Idempotency-Key was already used with a different request body. "
                "Use a new key for a new request.",
                code="idempotency_key_reused",
                param="Idempotency-Key",
                status=422,
            )
        if row["state"] != "done":
            raise conflict(
                "A request with this Idempotency-Key is still being answered. "
                "Retry after it has finished.",
                "idempotency_key_in_use",
            )
        return Replay(row["task_id"], int(row["status"]), json.loads(row["body"]))
    conn.execute(
        "INSERT OR REPLACE INTO idempotency_keys (client_id, key, request_digest, state, "
        "task_id, created_at, expires_at) VALUES (?, ?, ?, 'in_flight', ?, ?, ?)",
        (claim.client_id, claim.key, claim.digest, task_id, now, now + claim.ttl_s),
    )
    return None


def mark_done(conn: sqlite3.Connection, claim: IdempotencyClaim, status: int, body: Any) -> None:
    """Inside a write: the key's answer is final (a retry replays `status` and `body`)."""
    mark_answered(conn, [(status, json.dumps(body), claim.client_id, claim.key)])


def mark_answered(conn: sqlite3.Connection, answers: list[tuple[int, str, str, str]]) -> None:
    """mark_done for many keys at once, each answer's body as JSON text already: rows of
    (status, body JSON, client id, key)."""
    conn.executemany(
        "UPDATE idempotency_keys SET state='done', status=?, body=? WHERE client_id=? AND key=?",
        answers,
    )


async def complete_key(db: Database, claim: IdempotencyClaim, status: int, body: Any) -> None:
    """Store the final answer of a sync or stream request under its key."""
    await db.run(lambda conn: mark_done(conn, claim, status, body))


async def release_key(db: Database, claim: IdempotencyClaim) -> None:
    """Forget a key whose request did not produce an answer to replay."""
    await db.run(
        lambda conn: conn.execute(
            "DELETE FROM idempotency_keys WHERE client_id=? AND key=? AND state='in_flight'",
            (claim.client_id, claim.key),
        ).close()
    )


def release_in_flight_in(conn: sqlite3.Connection) -> int:
    """At startup, inside its transaction: keys left in flight by a dead process are
    released, never stuck at 409."""
    return int(conn.execute("DELETE FROM idempotency_keys WHERE state='in_flight'").rowcount)


async def release_in_flight(db: Database) -> int:
    """release_in_flight_in as a write of its own."""
    return await db.run(release_in_flight_in)


async def purge_expired(db: Database, batch: int = 500, *, now: float | None = None) -> int:
    """Delete keys past their own expiry (independent of task retention), in batches."""
    cutoff = int(time.time() if now is None else now)
    total = 0
    while True:
        count = await db.run(
            lambda conn: (
                conn.execute(
                    "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM "
                    "idempotency_keys WHERE expires_at<=? LIMIT ?)",
                    (cutoff, batch),
                ).rowcount
            )
        )
        total += count
        if count < batch:
            return total
