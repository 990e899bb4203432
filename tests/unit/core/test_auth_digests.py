"""The token hash of each well-formed Authorization value is kept by the value (B1): a value
seen before answers exactly as a new one would, a revoked token is still refused, a
malformed value is refused naming its header every time, and the memory stays bounded."""

from __future__ import annotations

import pytest

from lmsp_desktop.core import auth
from lmsp_desktop.core.auth import authenticate
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage.clients import create_client, revoke_client
from lmsp_desktop.core.storage.store import Store

READ = frozenset({"models:read"})


async def refused(store: Store, authorization: str, header: str = "Authorization") -> LmspError:
    with pytest.raises(LmspError) as info:
        await authenticate(store.db, authorization, None, header)
    assert info.value.status == 401
    return info.value


async def test_a_value_seen_before_is_the_same_client_until_revoked(store: Store) -> None:
    client, token = await create_client(store.db, "laptop", READ)
    for _ in range(3):
        principal = await authenticate(store.db, f"Bearer {token}", None)
        assert (principal.client_id, principal.scopes) == (client["id"], READ)
    await revoke_client(store.db, client["id"])
    for _ in range(2):
        assert "revoked" in (await refused(store, f"Bearer {token}")).message


@pytest.mark.parametrize(
    ("authorization", "header", "named"),
    [
        ("Bearer sk-not-ours", "Authorization", "The Authorization header is not `Bearer lmsp_"),
        ("Bearer lmsp_short", "Authorization", "The Authorization header is not `Bearer lmsp_"),
        ("Basic c2VjcmV0", "Authorization", "The Authorization header is not `Bearer lmsp_"),
        ("Bearer sk-ant-secret", "x-api-key", "The x-api-key header is not an `lmsp_"),
    ],
)
async def test_a_malformed_value_is_refused_naming_its_header_every_time(
    store: Store, authorization: str, header: str, named: str
) -> None:
    for _ in range(3):
        error = await refused(store, authorization, header)
        assert error.code == "invalid_token" and error.message.startswith(named)
    assert authorization not in auth._digests


async def test_many_unknown_tokens_keep_the_memory_bounded(store: Store) -> None:
    client, token = await create_client(store.db, "laptop", READ)
    for i in range(auth.MAX_DIGESTS + 50):
        unknown = await refused(store, f"Bearer lmsp_{i:032d}")
        assert unknown.code == "invalid_token" and "not known" in unknown.message
        assert len(auth._digests) <= auth.MAX_DIGESTS
    assert (await authenticate(store.db, f"Bearer {token}", None)).client_id == client["id"]
