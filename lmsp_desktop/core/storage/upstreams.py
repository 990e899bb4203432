"""The `upstreams` table: registered OpenAI-compatible servers (issue 17).

The CLI writes it while a service may be running; the service notices by `updated_at`.
Rows read from here never carry the API key out: `UpstreamRow.api_key` is resolved from the
keyring or the database only for the HTTP client, and `public()` leaves it out.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lmsp_desktop.core.errors import LmspError, conflict, invalid, not_found
from lmsp_desktop.core.storage.db import Database
from lmsp_desktop.core.upstreams import DEFAULT_CONCURRENCY, keys

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class UpstreamRow:
    """One registered upstream. `api_key` is the usable key (None without one)."""

    name: str
    base_url: str
    key_store: str  # none | keyring | database
    max_concurrency: int
    timeout_s: float
    created_at: int
    updated_at: float
    api_key: str | None = None

    def public(self) -> dict[str, Any]:
        """What the API, the CLI and the window may show: never the key itself."""
        return {
            "name": self.name,
            "base_url": self.base_url,
            "api_key": "set" if self.key_store != "none" else "none",
            "key_store": self.key_store,
            "max_concurrency": self.max_concurrency,
            "timeout_s": self.timeout_s,
            "created_at": self.created_at,
        }

    def __repr__(self) -> str:  # a row printed in a log or a traceback shows no key
        return f"UpstreamRow(name={self.name!r}, base_url={self.base_url!r})"


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise invalid(
            "An upstream name is 1-32 characters of a-z, 0-9, '-' and '_', starting with a "
            f"letter or digit (its models appear as NAME/<model>); got {name!r}.",
            "name",
        )
    return name


def normalise_url(url: object) -> str:
    """`http://host:8000`, `http://host:8000/` and `http://host:8000/v1` all become
    `http://host:8000/v1`, the base the OpenAI clients use."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid(
            f"The upstream URL must be an http:// or https:// address such as "
            f"http://gpu-box:8000/v1; got {url!r}.",
            "url",
        )
    if parts.query or parts.fragment:
        raise invalid("The upstream URL must not have a query or fragment.", "url")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


def check_limits(max_concurrency: int, timeout_s: float) -> None:
    if not 1 <= max_concurrency <= 256:
        raise invalid("--max-concurrency must be between 1 and 256.", "max_concurrency")
    if not 0.1 <= timeout_s <= 3600:
        raise invalid("--timeout must be between 0.1 and 3600 seconds.", "timeout_s")


async def add_upstream(
    db: Database,
    name: str,
    url: str,
    api_key: str | None,
    *,
    max_concurrency: int = DEFAULT_CONCURRENCY,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    replace: bool = False,
) -> UpstreamRow:
    """Register (or with `replace`, re-register) an upstream; the key goes to the keyring
    when there is one, else into this 0600 database."""
    check_name(name)
    base_url = normalise_url(url)
    check_limits(max_concurrency, timeout_s)
    existing = await db.fetchone("SELECT name FROM upstreams WHERE name=?", (name,))
    if existing is not None and not replace:
        raise conflict(
            f"An upstream named {name} exists already. Remove it first "
            f"(lmsp-desktop upstream remove {name}) or add it with --replace.",
            "upstream_exists",
        )
    key_store, stored_key = "none", None
    if api_key:
        if keys.save_key(name, api_key):
            key_store = "keyring"
        else:
            key_store, stored_key = "database", api_key
    elif existing is not None:
        keys.delete_key(name)
    now = time.time()
    await db.run(
        lambda conn: conn.execute(
            "INSERT OR REPLACE INTO upstreams (name, base_url, key_store, api_key,"
            " max_concurrency, timeout_s, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
            (name, base_url, key_store, stored_key, max_concurrency, timeout_s, int(now), now),
        ).close()
    )
    return UpstreamRow(name, base_url, key_store, max_concurrency, timeout_s, int(now), now)


async def remove_upstream(db: Database, name: str) -> None:
    removed = await db.run(
        lambda conn: conn.execute("DELETE FROM upstreams WHERE name=?", (name,)).rowcount
    )
    if not removed:
        raise not_found(
            f"There is no upstream named {name}. `lmsp-desktop upstream list` shows them.",
            code="upstream_not_found",
            param="name",
        )
    keys.delete_key(name)


async def list_upstreams(db: Database, *, with_keys: bool = False) -> list[UpstreamRow]:
    """Every upstream by name; `with_keys` resolves the usable keys (for the HTTP client)."""
    rows = await db.fetchall("SELECT * FROM upstreams ORDER BY name")
    found = []
    for r in rows:
        key = None
        if with_keys and r["key_store"] == "keyring":
            key = keys.load_key(r["name"])
        elif with_keys and r["key_store"] == "database":
            key = r["api_key"]
        found.append(
            UpstreamRow(
                r["name"],
                r["base_url"],
                r["key_store"],
                r["max_concurrency"],
                r["timeout_s"],
                r["created_at"],
                r["updated_at"],
                key,
            )
        )
    return found


async def upstreams_version(db: Database) -> tuple[int, float]:
    """(count, newest updated_at): changes when any upstream is added, replaced or removed."""
    row = await db.fetchone("SELECT count(*), coalesce(max(updated_at), 0) FROM upstreams")
    return (int(row[0]), float(row[1])) if row else (0, 0.0)


__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT_S",
    "LmspError",
    "UpstreamRow",
    "add_upstream",
    "check_name",
    "list_upstreams",
    "normalise_url",
    "remove_upstream",
    "upstreams_version",
]
