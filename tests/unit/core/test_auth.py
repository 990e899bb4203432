"""Bearer tokens, scopes and last-seen bookkeeping, against a real temporary store."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from lmsp_desktop.core import auth
from lmsp_desktop.core.auth import OWNER, Principal, authenticate, parse_scopes
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage import clients as clients_module
from lmsp_desktop.core.storage.clients import create_client, get_client, revoke_client, set_scopes
from lmsp_desktop.core.storage.store import Store

READ = frozenset({"models:read", "responses:read"})


def test_parse_scopes_takes_lists_and_separated_strings() -> None:
    assert parse_scopes("models:read responses:read", "scopes") == READ
    assert parse_scopes("models:read,responses:read", "scopes") == READ
    assert parse_scopes(["models:read", "responses:read"], "scopes") == READ


@pytest.mark.parametrize("value", ["models:read sudo", [], "", [1]])
def test_parse_scopes_refuses_unknown_or_empty_naming_the_param(value: object) -> None:
    with pytest.raises(LmspError) as info:
        parse_scopes(value, "scopes")  # type: ignore[arg-type]
    assert info.value.status == 400
    assert info.value.param == "scopes"
    assert info.value.code == "invalid_scope"


def test_require_refuses_a_missing_scope_and_says_how_to_get_it() -> None:
    reader = Principal("client_1", "reader", READ)
    reader.require("models:read")
    with pytest.raises(LmspError) as info:
        reader.require("responses:write")
    assert (info.value.status, info.value.code, info.value.type) == (
        403,
        "insufficient_scope",
        "permission_error",
    )
    assert "responses:write" in info.value.message and "Pair again" in info.value.message


def test_admin_and_owner_see_everything_others_only_their_own() -> None:
    admin = Principal("client_a", "boss", frozenset({"admin"}))
    admin.require("responses:write")
    OWNER.require("admin")
    assert admin.owner_filter() is None and OWNER.owner_filter() is None
    assert Principal("client_b", "b", READ).owner_filter() == "client_b"


async def test_a_created_token_authenticates_as_its_client(store: Store) -> None:
    client, token = await create_client(store.db, "laptop", READ)
    principal = await authenticate(store.db, f"Bearer {token}", "127.0.0.1")
    assert principal == Principal(client["id"], "laptop", READ)
    # the scheme is case-insensitive, as in RFC 6750
    assert (await authenticate(store.db, f"bearer {token}", None)).client_id == client["id"]


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "missing_token"),
        ("", "missing_token"),
        ("Basic dXNlcjpwdw==", "invalid_token"),
        ("Bearer sk-not-ours", "invalid_token"),
        ("Bearer lmsp_" + "A" * 43, "invalid_token"),
    ],
)
async def test_missing_malformed_and_unknown_tokens_get_401(
    store: Store, header: str | None, code: str
) -> None:
    with pytest.raises(LmspError) as info:
        await authenticate(store.db, header, "127.0.0.1")
    assert info.value.status == 401
    assert info.value.code == code
    assert "POST /v1/pairing" in info.value.message


async def test_revocation_takes_effect_at_the_next_request(store: Store) -> None:
    client, token = await create_client(store.db, "laptop", READ)
    await authenticate(store.db, f"Bearer {token}", None)
    await revoke_client(store.db, client["id"])
    with pytest.raises(LmspError) as info:
        await authenticate(store.db, f"Bearer {token}", None)
    assert (info.value.status, info.value.code) == (401, "invalid_token")
    assert "revoked" in info.value.message


async def test_a_revoke_by_another_process_is_seen_within_a_second(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verified tokens are kept in memory for VERIFIED_FOR_S; a revoke written to the file by
    another process (the CLI while `serve` runs) is seen once that has passed."""
    now = [100.0]
    monkeypatch.setattr(clients_module, "_clock", lambda: now[0])
    client, token = await create_client(store.db, "laptop", READ)
    await authenticate(store.db, f"Bearer {token}", None)
    with sqlite3.connect(store.db.path) as other:  # another process's connection
        other.execute("UPDATE clients SET revoked_at=1 WHERE id=?", (client["id"],))
    now[0] += clients_module.VERIFIED_FOR_S
    with pytest.raises(LmspError) as info:
        await authenticate(store.db, f"Bearer {token}", None)
    assert "revoked" in info.value.message


async def test_a_revoke_during_a_tokens_first_read_is_not_forgotten(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that read its client just before a revoke committed is let through (it came
    first), but what it read is not kept: the next request is refused."""
    client, token = await create_client(store.db, "laptop", READ)
    original = store.db.fetchone
    revoked: list[dict[str, Any]] = []

    async def read_then_revoke(sql: str, params: Any = ()) -> Any:
        row = await original(sql, params)
        if "token_hash=?" in sql and not revoked:
            revoked.append(await revoke_client(store.db, client["id"]))
        return row

    monkeypatch.setattr(store.db, "fetchone", read_then_revoke)
    await authenticate(store.db, f"Bearer {token}", None)
    assert revoked and revoked[0]["revoked"]
    with pytest.raises(LmspError) as info:
        await authenticate(store.db, f"Bearer {token}", None)
    assert "revoked" in info.value.message


async def test_changed_scopes_apply_at_the_next_request(store: Store) -> None:
    client, token = await create_client(store.db, "laptop", READ)
    assert (await authenticate(store.db, f"Bearer {token}", None)).scopes == READ
    await set_scopes(store.db, client["id"], frozenset({"responses:write"}))
    principal = await authenticate(store.db, f"Bearer {token}", None)
    assert principal.scopes == frozenset({"responses:write"})


async def test_last_seen_is_written_at_most_every_30_seconds(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(auth, "_now", lambda: now[0])
    client, token = await create_client(store.db, "laptop", READ)
    writes: list[None] = []
    store.db.after_commit.append(lambda: writes.append(None))

    await authenticate(store.db, f"Bearer {token}", "10.0.0.5")
    seen = await get_client(store.db, client["id"])
    assert (seen["last_seen_at"], seen["last_seen_addr"]) == (1_000_000, "10.0.0.5")

    for step in range(10):  # ten requests within 29 s: no further write
        now[0] += 2.9 * (step > 0)
        await authenticate(store.db, f"Bearer {token}", "10.0.0.6")
    assert len(writes) == 1

    now[0] = 1_000_031.0
    await authenticate(store.db, f"Bearer {token}", "10.0.0.7")
    seen = await get_client(store.db, client["id"])
    assert (seen["last_seen_at"], seen["last_seen_addr"]) == (1_000_031, "10.0.0.7")
    assert len(writes) == 2


@pytest.mark.parametrize(
    ("header", "authorization", "named"),
    [
        ("x-api-key", "Bearer sk-ant-secret", "The x-api-key header is not an `lmsp_…` token "),
        ("x-api-key", "Bearer Bearer x", "The x-api-key header is not an `lmsp_…` token "),
        ("Authorization", "Basic c2VjcmV0", "The Authorization header is not `Bearer lmsp_…` "),
    ],
)
async def test_a_malformed_token_is_refused_naming_the_header_it_came_in(
    store: Store, header: str, authorization: str, named: str
) -> None:
    with pytest.raises(LmspError) as info:
        await authenticate(store.db, authorization, None, header)
    assert (info.value.status, info.value.code) == (401, "invalid_token")
    assert info.value.message.startswith(named)
    assert "POST /v1/pairing" in info.value.message  # the advice on getting a token stays
    assert "secret" not in info.value.message and "c2VjcmV0" not in info.value.message
