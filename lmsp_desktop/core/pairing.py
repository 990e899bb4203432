"""Pairing clients with the service, modelled on the OAuth 2.0 device authorization grant.

Two ways in (LMSP_API.md "Pairing"):
- device flow: a client starts a request, shows its user code, the owner approves it (perhaps
  with fewer scopes) in the GUI or CLI, and the client polling with its pairing secret gets
  its token once;
- claim: the GUI shows a one-time code that a client exchanges for a token.

Everything lives in the `pairings` table, so pending requests survive a restart until they
expire. Only hashes of pairing secrets are stored, and a client's row and token are created
in the transaction of the successful poll or claim, so no plaintext token is ever stored.

"Ignore" hides a request from the pending list without telling the client: it keeps hearing
`authorization_pending` until the request expires, like a Syncthing device left unanswered.
Five wrong secrets kill a device pairing; five wrong claim codes kill every claim code then
live (the owner makes a new one). Attempts are also rate limited per remote address.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lmsp_desktop.core.errors import LmspError, invalid, not_found
from lmsp_desktop.core.ids import new_id, token_hash
from lmsp_desktop.core.listeners import notify
from lmsp_desktop.core.scopes import SCOPES
from lmsp_desktop.core.storage.clients import clean_name, insert_client

if TYPE_CHECKING:
    from lmsp_desktop.core.storage.db import Database

log = logging.getLogger(__name__)

CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # no vowels (no words), no look-alikes
CODE_LENGTH = 8
MAX_FAILURES = 5
SLOW_DOWN_STEP_S = 5  # RFC 8628 3.5: each slow_down adds five seconds to the interval
PURGE_AFTER_S = 24 * 3600  # finished pairing rows are kept a day, for the record
LIVE_STATES = ("pending", "approved", "ignored")


def new_user_code() -> str:
    """Eight characters of CODE_ALPHABET, each by rejection sampling (no modulo bias)."""
    chars: list[str] = []
    while len(chars) < CODE_LENGTH:
        value = secrets.randbits(5)  # 0..31; the 12 values past the alphabet are redrawn
        if value < len(CODE_ALPHABET):
            chars.append(CODE_ALPHABET[value])
    return "".join(chars)


def format_code(code: str) -> str:
    """`ABCDEFGH` → `ABCD-EFGH`, as people read and type it."""
    return f"{code[:4]}-{code[4:]}"


def normalize_code(text: object) -> str | None:
    """A typed code without dashes or spaces, in capitals; None if it cannot be a code."""
    if not isinstance(text, str):
        return None
    code = text.replace("-", "").replace(" ", "").upper()
    if len(code) != CODE_LENGTH or any(ch not in CODE_ALPHABET for ch in code):
        return None
    return code


class RateLimiter:
    """A token bucket per remote address: `burst` attempts at once, refilled `per_minute`."""

    def __init__(self, burst: int, per_minute: float, clock: Callable[[], float]) -> None:
        self.burst = float(burst)
        self.rate = per_minute / 60.0
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # address → (level, at)

    def _level(self, key: str) -> float:
        level, at = self._buckets.get(key, (self.burst, self.clock()))
        return min(self.burst, level + (self.clock() - at) * self.rate)

    def check(self, address: str | None) -> None:
        """Refuse with 429 while this address has no attempts left."""
        level = self._level(str(address))
        if level < 1.0:
            wait = max(1, int((1.0 - level) / self.rate + 0.999))
            raise LmspError(
                f"Too many pairing attempts from {address or 'this address'}. "
                f"Wait {wait} seconds, then try again.",
                code="rate_limited",
                status=429,
                type="rate_limit_error",
                extra={"retry_after": wait},
            )

    def spend(self, address: str | None) -> None:
        key = str(address)
        self._buckets[key] = (self._level(key) - 1.0, self.clock())
        if len(self._buckets) > 1000:  # forget addresses whose buckets have refilled
            for other in [k for k in self._buckets if self._level(k) >= self.burst]:
                del self._buckets[other]


@dataclass
class _Outcome:
    """What a transaction decided; errors are raised only after its writes are committed."""

    result: dict[str, Any] | None = None
    error: LmspError | None = None
    changed: bool = False  # the pending list or the clients changed: tell the listeners
    wrong: bool = False  # a wrong secret or code: counts against the address's rate limit


def _refuse(code: str, message: str, **extra: Any) -> _Outcome:
    """A 400 with an RFC 8628 / RFC 6749 error code, as the outcome of a poll."""
    return _Outcome(error=LmspError(message, code=code, status=400, extra=extra or None))


def _scopes(text: str | None) -> list[str]:
    return sorted(json.loads(text)) if text else []


class PairingManager:
    """Device-flow pairing and one-time claim codes, kept in the store."""

    def __init__(
        self,
        db: Database,
        *,
        expires_in: int = 300,
        interval: int = 5,
        clock: Callable[[], float] = time.time,
        attempts_burst: int = 10,
        attempts_per_minute: float = 10.0,
    ) -> None:
        self.db = db
        self.expires_in = expires_in
        self.interval = interval
        self.clock = clock
        # Called on the loop after a pending request appears, is answered, expires by use,
        # or turns into a client (the GUI refreshes its cards and client table).
        self.listeners: list[Callable[[], None]] = []
        # Shown to device clients if set, e.g. the service URL (RFC 8628 verification_uri).
        self.verification_uri: str | None = None
        self.limiter = RateLimiter(attempts_burst, attempts_per_minute, clock)

    # -- the client's side --------------------------------------------------------------
    async def start(
        self, client_name: str, scopes: frozenset[str], address: str | None
    ) -> dict[str, Any]:
        """Open a device pairing request: the client shows `user_code` and polls."""
        self.limiter.check(address)
        self.limiter.spend(address)
        name = clean_name(client_name, "client_name")
        requested = self._valid_scopes(scopes, "scopes")
        secret = secrets.token_urlsafe(32)  # 256 bits
        pairing_id = new_id("pair")
        now = self.clock()

        def work(conn: sqlite3.Connection) -> str:
            conn.execute("DELETE FROM pairings WHERE expires_at < ?", (int(now - PURGE_AFTER_S),))
            code = self._unused_code(conn, now)
            conn.execute(
                "INSERT INTO pairings (id, kind, client_name, address, scopes, user_code,"
                " secret_hash, state, created_at, expires_at, interval_s)"
                " VALUES (?, 'device', ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
                (
                    pairing_id,
                    name,
                    address,
                    json.dumps(sorted(requested)),
                    code,
                    token_hash(secret),
                    int(now),
                    int(now) + self.expires_in,
                    self.interval,
                ),
            )
            return code

        code = await self.db.run(work)
        self._notify()
        answer: dict[str, Any] = {
            "pairing_id": pairing_id,
            "pairing_secret": secret,
            "user_code": format_code(code),
            "scopes": sorted(requested),
            "interval": self.interval,
            "expires_in": self.expires_in,
        }
        if self.verification_uri:
            answer["verification_uri"] = self.verification_uri
        return answer

    async def poll(
        self, pairing_id: str, secret: str, address: str | None = None
    ) -> dict[str, Any]:
        """The token once approved; otherwise a 400 with an RFC 8628 error code."""
        self.limiter.check(address)
        now = self.clock()

        def work(conn: sqlite3.Connection) -> _Outcome:
            row = _fetch(conn, "SELECT * FROM pairings WHERE id=? AND kind='device'", (pairing_id,))
            return self._poll_locked(conn, row, secret, now)

        return self._finish(await self.db.run(work), address)

    def _poll_locked(
        self, conn: sqlite3.Connection, row: sqlite3.Row | None, secret: str, now: float
    ) -> _Outcome:
        again = "Start pairing again with POST /v1/pairing."
        if row is None:
            error = not_found(f"No pairing request has this id. {again}", "pairing_not_found")
            return _Outcome(error=error, wrong=True)
        if row["failures"] >= MAX_FAILURES:
            return _refuse(
                "access_denied",
                f"This pairing request was cancelled after {MAX_FAILURES} wrong secrets. " + again,
            )
        if not hmac.compare_digest(str(row["secret_hash"]), token_hash(str(secret))):
            failures = row["failures"] + 1
            dead = failures >= MAX_FAILURES
            conn.execute(
                "UPDATE pairings SET failures=?, state=CASE WHEN ? THEN 'dead' ELSE state END"
                " WHERE id=?",
                (failures, dead, row["id"]),
            )
            left = MAX_FAILURES - failures
            message = "The pairing secret is wrong. " + (
                f"The request is now cancelled. {again}"
                if dead
                else f"{left} more wrong attempt{'s' if left > 1 else ''} cancel the request."
            )
            outcome = _refuse("invalid_grant", message)
            outcome.changed, outcome.wrong = dead, True
            return outcome
        state = row["state"]
        if state == "issued":
            return _refuse(
                "invalid_grant", f"This pairing's token was already handed out once. {again}"
            )
        if now >= row["expires_at"]:
            if state == "ignored":  # the owner saw it and let it lapse: do not ask again
                return _refuse(
                    "access_denied", "The service's owner did not approve this pairing request."
                )
            return _refuse(
                "expired_token", f"This pairing request expired before it was approved. {again}"
            )
        if state in ("denied", "dead"):
            return _refuse("access_denied", "The service's owner denied this pairing request.")
        if state == "approved":
            cursor = conn.execute(
                "UPDATE pairings SET state='issued' WHERE id=? AND state='approved'", (row["id"],)
            )
            if cursor.rowcount != 1:  # pragma: no cover - we hold the write lock
                raise RuntimeError("pairing changed under the write lock")
            granted = frozenset(_scopes(row["granted_scopes"]))
            client, token = insert_client(conn, row["client_name"], granted)
            conn.execute("UPDATE pairings SET client_id=? WHERE id=?", (client["id"], row["id"]))
            return _Outcome(result=_token_answer(client, token), changed=True)
        # pending or ignored: RFC 8628 3.5 polling rules
        interval = int(row["interval_s"])
        last = row["last_poll_at"]
        if last is not None and now - last < interval:
            interval += SLOW_DOWN_STEP_S
            conn.execute(
                "UPDATE pairings SET interval_s=?, last_poll_at=? WHERE id=?",
                (interval, now, row["id"]),
            )
            return _refuse(
                "slow_down",
                f"Polled too fast. Wait {interval} seconds between polls from now on.",
                interval=interval,
            )
        conn.execute("UPDATE pairings SET last_poll_at=? WHERE id=?", (now, row["id"]))
        return _refuse(
            "authorization_pending",
            "Waiting for the owner to approve this request in LMSP Desktop (or with "
            f"`lmsp-desktop pairing approve {format_code(row['user_code'])}`). "
            f"Poll again in {interval} seconds.",
            interval=interval,
        )

    async def claim(self, code: str, client_name: str, address: str | None) -> dict[str, Any]:
        """Exchange a one-time code that the GUI shows for a token."""
        self.limiter.check(address)
        name = clean_name(client_name, "client_name")
        normalized = normalize_code(code)
        now = self.clock()

        def work(conn: sqlite3.Connection) -> _Outcome:
            row = None
            if normalized is not None:
                row = _fetch(
                    conn,
                    "SELECT * FROM pairings WHERE kind='claim' AND user_code=? AND"
                    " state='pending' AND expires_at>? ORDER BY created_at DESC LIMIT 1",
                    (normalized, now),
                )
            if row is None:
                outcome = self._wrong_claim(conn, now)
            else:
                conn.execute(
                    "UPDATE pairings SET state='issued', client_name=?, address=? WHERE id=?",
                    (name, address, row["id"]),
                )
                client, token = insert_client(conn, name, frozenset(_scopes(row["scopes"])))
                conn.execute(
                    "UPDATE pairings SET client_id=? WHERE id=?", (client["id"], row["id"])
                )
                outcome = _Outcome(result=_token_answer(client, token), changed=True)
            return outcome

        return self._finish(await self.db.run(work), address)

    def _wrong_claim(self, conn: sqlite3.Connection, now: float) -> _Outcome:
        # A wrong code cannot be tied to one claim code, so it counts against all live ones.
        conn.execute(
            "UPDATE pairings SET failures=failures+1 WHERE kind='claim' AND state='pending'"
            " AND expires_at>?",
            (now,),
        )
        cursor = conn.execute(
            "UPDATE pairings SET state='dead' WHERE kind='claim' AND state='pending'"
            " AND failures>=?",
            (MAX_FAILURES,),
        )
        error = LmspError(
            "This code is not valid: it is mistyped, used already, expired, or was cancelled "
            f"after {MAX_FAILURES} wrong attempts. Check it, or ask the owner for a new one "
            "(Clients ▸ Pair a client… in LMSP Desktop).",
            code="invalid_grant",
            param="code",
            status=400,
        )
        return _Outcome(error=error, changed=cursor.rowcount > 0, wrong=True)

    def _finish(self, outcome: _Outcome, address: str | None) -> dict[str, Any]:
        if outcome.wrong:
            self.limiter.spend(address)
        if outcome.changed:
            self._notify()
        if outcome.error is not None:
            raise outcome.error
        assert outcome.result is not None
        return outcome.result

    # -- the owner's side ---------------------------------------------------------------
    async def pending(self, *, include_ignored: bool = False) -> list[dict[str, Any]]:
        """Device requests waiting for an answer, oldest first. Ignored ones (whose clients
        keep polling until they expire) only with `include_ignored`."""
        states = "('pending', 'ignored')" if include_ignored else "('pending')"
        rows = await self.db.fetchall(
            f"SELECT * FROM pairings WHERE kind='device' AND state IN {states} AND expires_at>?"
            " AND failures<? ORDER BY created_at, rowid",
            (self.clock(), MAX_FAILURES),
        )
        return [self._request_dict(row) for row in rows]

    async def approve(
        self, code_or_id: str, scopes: frozenset[str] | None = None
    ) -> dict[str, Any]:
        """Approve a request, granting all it asked for or fewer scopes (never more)."""

        def work(conn: sqlite3.Connection) -> sqlite3.Row | None:
            row = self._find_live(conn, code_or_id)
            requested = frozenset(_scopes(row["scopes"]))
            granted = requested if scopes is None else self._valid_scopes(scopes, "scopes")
            if not granted <= requested:
                extra = ", ".join(sorted(granted - requested))
                raise invalid(
                    f"The client did not ask for {extra}; you can grant only what it asked for "
                    f"({', '.join(sorted(requested))}) or less.",
                    "scopes",
                    code="invalid_scope",
                )
            conn.execute(
                "UPDATE pairings SET state='approved', granted_scopes=? WHERE id=?",
                (json.dumps(sorted(granted)), row["id"]),
            )
            return _fetch(conn, "SELECT * FROM pairings WHERE id=?", (row["id"],))

        updated = await self.db.run(work)
        self._notify()
        assert updated is not None
        return self._request_dict(updated)

    async def outcome(self, pairing_id: str) -> str | None:
        """How a device request stands now, for an owner whose answer found it no longer
        waiting (answered meanwhile in another window or with `lmsp-desktop pairing …`):
        approved (its token perhaps issued already), denied, ignored, pending, expired, or
        None when there is no such request. Five wrong secrets ended it: expired."""
        row = await self.db.fetchone(
            "SELECT state, expires_at, failures FROM pairings WHERE id=? AND kind='device'",
            (pairing_id,),
        )
        if row is None:
            return None
        state = str(row["state"])
        if state in ("approved", "issued"):
            return "approved"
        if state == "denied":
            return state
        if state == "dead" or row["failures"] >= MAX_FAILURES:
            return "expired"
        return "expired" if row["expires_at"] <= self.clock() else state

    async def deny(self, code_or_id: str) -> None:
        """Refuse a request; the client hears `access_denied` at its next poll."""
        await self._set_state(code_or_id, "denied")

    async def ignore(self, code_or_id: str) -> None:
        """Hide a request; the client keeps hearing `authorization_pending` until expiry."""
        await self._set_state(code_or_id, "ignored")

    async def _set_state(self, code_or_id: str, state: str) -> None:
        def work(conn: sqlite3.Connection) -> None:
            row = self._find_live(conn, code_or_id)
            conn.execute("UPDATE pairings SET state=? WHERE id=?", (state, row["id"]))

        await self.db.run(work)
        self._notify()

    async def create_claim_code(
        self, scopes: frozenset[str], expires_in: int = 600
    ) -> dict[str, Any]:
        """A one-time code for the GUI's "Pair a client…" dialog."""
        granted = self._valid_scopes(scopes, "scopes")
        now = self.clock()
        pairing_id = new_id("pair")

        def work(conn: sqlite3.Connection) -> str:
            code = self._unused_code(conn, now)
            conn.execute(
                "INSERT INTO pairings (id, kind, scopes, user_code, state, created_at,"
                " expires_at, interval_s) VALUES (?, 'claim', ?, ?, 'pending', ?, ?, 0)",
                (pairing_id, json.dumps(sorted(granted)), code, int(now), int(now) + expires_in),
            )
            return code

        code = await self.db.run(work)
        return {
            "pairing_id": pairing_id,
            "code": format_code(code),
            "expires_at": int(now) + expires_in,
            "expires_in": expires_in,
            "scopes": sorted(granted),
        }

    async def end_claim_code(self, pairing_id: str) -> None:
        """End a one-time code now (the dialog showing it made a new one or closed)."""

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE pairings SET state='dead' WHERE id=? AND kind='claim' AND state='pending'",
                (pairing_id,),
            )

        await self.db.run(work)

    async def claim_code_status(self, pairing_id: str) -> dict[str, Any]:
        """{state: pending|issued|dead|expired, client_name}: has the code been used, by whom."""
        row = await self.db.fetchone(
            "SELECT state, client_name, expires_at FROM pairings WHERE id=? AND kind='claim'",
            (pairing_id,),
        )
        if row is None:
            return {"state": "dead", "client_name": None}
        state = row["state"]
        if state == "pending" and row["expires_at"] <= self.clock():
            state = "expired"
        return {"state": state, "client_name": row["client_name"]}

    # -- helpers ------------------------------------------------------------------------
    def _find_live(self, conn: sqlite3.Connection, code_or_id: str) -> sqlite3.Row:
        """A device request still waiting for an answer, by its id or its user code."""
        now = self.clock()
        live = "kind='device' AND state IN ('pending', 'ignored') AND expires_at>? AND failures<?"
        text = str(code_or_id).strip()
        row = None
        if text.startswith("pair_"):
            row = _fetch(
                conn, f"SELECT * FROM pairings WHERE id=? AND {live}", (text, now, MAX_FAILURES)
            )
        elif (code := normalize_code(text)) is not None:
            row = _fetch(
                conn,
                f"SELECT * FROM pairings WHERE user_code=? AND {live}"
                " ORDER BY created_at DESC LIMIT 1",
                (code, now, MAX_FAILURES),
            )
        if row is None:
            raise not_found(
                f"No pairing request waits with the code or id {text!r}. Check the code the "
                f"client shows (like WDJB-MJHT); requests expire after {self.expires_in // 60}"
                " minutes. List them with `lmsp-desktop pairing list`.",
                "pairing_not_found",
            )
        return row

    def _unused_code(self, conn: sqlite3.Connection, now: float) -> str:
        placeholders = ", ".join("?" for _ in LIVE_STATES)
        while True:
            code = new_user_code()
            clash = _fetch(
                conn,
                f"SELECT 1 FROM pairings WHERE user_code=? AND expires_at>? AND state IN"
                f" ({placeholders})",
                (code, now, *LIVE_STATES),
            )
            if clash is None:
                return code

    @staticmethod
    def _valid_scopes(scopes: frozenset[str], param: str) -> frozenset[str]:
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown:
            raise invalid(
                f"Unknown scopes in `{param}`: {', '.join(unknown)}. "
                f"Use any of: {', '.join(SCOPES)}.",
                param,
                code="invalid_scope",
            )
        if not scopes:
            raise invalid(f"`{param}` must name at least one scope.", param, code="invalid_scope")
        return frozenset(scopes)

    def _request_dict(self, row: sqlite3.Row) -> dict[str, Any]:
        return {
            "pairing_id": row["id"],
            "client_name": row["client_name"],
            "address": row["address"],
            "scopes": _scopes(row["scopes"]),
            "granted_scopes": _scopes(row["granted_scopes"]) or None,
            "user_code": format_code(row["user_code"]),
            "state": row["state"],
            "created_at": row["created_at"],
            "expires_at": row["expires_at"],
        }

    def _notify(self) -> None:
        notify(self.listeners)  # a broken GUI callback must not fail a client's request


def _fetch(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(sql, params).fetchone()
    return row


def _token_answer(client: dict[str, Any], token: str) -> dict[str, Any]:
    return {
        "access_token": token,
        "token_type": "bearer",
        "client_id": client["id"],
        "scopes": client["scopes"],
    }
