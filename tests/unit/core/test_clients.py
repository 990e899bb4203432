"""Client rows: tokens shown once and stored only as a hash, listing, revoking, scopes."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.ids import token_hash
from lmsp_desktop.core.storage.clients import (
    create_client,
    list_clients,
    revoke_client,
    set_scopes,
)
from lmsp_desktop.core.storage.store import Store

WRITE = frozenset({"responses:write", "responses:read"})


async def test_the_plaintext_token_never_reaches_the_database_files(store: Store) -> None:
    client, token = await create_client(store.db, "script", WRITE)
    assert token.startswith("lmsp_") and len(token) >= 5 + 22  # ≥ 128 bits in base64
    assert client["token_prefix"] == token[:9]
    await store.db.checkpoint()
    path = database_path(store.data_dir)
    stored = b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))
    assert token.encode() not in stored
    assert token[9:].encode() not in stored  # not even the secret part
    assert token_hash(token).encode() in stored


async def test_list_shows_what_the_clients_page_needs(store: Store) -> None:
    first, _ = await create_client(store.db, "  first\nclient ", WRITE)
    second, _ = await create_client(store.db, "second", frozenset({"admin"}))
    listed = await list_clients(store.db)
    assert [c["id"] for c in listed] == [second["id"], first["id"]]  # newest first
    assert listed[1] == {
        "id": first["id"],
        "object": "client",
        "name": "first client",
        "scopes": ["responses:read", "responses:write"],
        "created_at": first["created_at"],
        "last_seen_at": None,
        "last_seen_addr": None,
        "token_prefix": first["token_prefix"],
        "revoked": False,
        "revoked_at": None,
    }
    assert "token_hash" not in listed[0]


async def test_revoke_marks_the_client_and_keeps_it_listed(store: Store) -> None:
    client, _ = await create_client(store.db, "old", WRITE)
    revoked = await revoke_client(store.db, client["id"])
    assert revoked["revoked"] is True and revoked["revoked_at"] is not None
    again = await revoke_client(store.db, client["id"])  # revoking twice is harmless
    assert again["revoked_at"] == revoked["revoked_at"]
    assert [c["revoked"] for c in await list_clients(store.db)] == [True]
    assert await list_clients(store.db, include_revoked=False) == []


async def test_unknown_ids_answer_404(store: Store) -> None:
    for call in (
        revoke_client(store.db, "client_nope"),
        set_scopes(store.db, "client_nope", WRITE),
    ):
        with pytest.raises(LmspError) as info:
            await call
        assert (info.value.status, info.value.code) == (404, "client_not_found")


async def test_names_and_scopes_are_validated(store: Store) -> None:
    with pytest.raises(LmspError) as info:
        await create_client(store.db, "   ", WRITE)
    assert info.value.param == "name"
    with pytest.raises(LmspError) as info:
        await create_client(store.db, "x" * 101, WRITE)
    assert info.value.param == "name"
    client, _ = await create_client(store.db, "ok", WRITE)
    with pytest.raises(LmspError) as info:
        await set_scopes(store.db, client["id"], frozenset())
    assert info.value.param == "scopes"
    assert (await set_scopes(store.db, client["id"], frozenset({"admin"})))["scopes"] == ["admin"]
