"""How a pairing request stands once it no longer waits (PairingManager.outcome): what the
Clients page says when its answer finds the request answered elsewhere (in a shell with
`lmsp-desktop pairing …`, or another window). A real temporary store, a hand-driven clock."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.pairing import MAX_FAILURES, PairingManager
from lmsp_desktop.core.storage.store import Store
from tests.unit.core.test_pairing import ASKED, Clock


async def test_each_way_a_request_ends_is_told(store: Store) -> None:
    clock = Clock()
    manager = PairingManager(store.db, expires_in=300, interval=5, clock=clock)
    approved, issued, denied, ignored, expired, wrong = [
        await manager.start(name, ASKED, "127.0.0.1") for name in ("a", "b", "c", "d", "e", "f")
    ]
    await manager.approve(approved["user_code"])
    await manager.approve(issued["pairing_id"])
    await manager.poll(issued["pairing_id"], issued["pairing_secret"])  # its token issued
    await manager.deny(denied["user_code"])
    await manager.ignore(ignored["user_code"])
    for _ in range(MAX_FAILURES):  # five wrong secrets end it
        with pytest.raises(LmspError):
            await manager.poll(wrong["pairing_id"], "not-its-secret")
    assert await manager.outcome(approved["pairing_id"]) == "approved"
    assert await manager.outcome(issued["pairing_id"]) == "approved"
    assert await manager.outcome(denied["pairing_id"]) == "denied"
    assert await manager.outcome(ignored["pairing_id"]) == "ignored"
    assert await manager.outcome(expired["pairing_id"]) == "pending"
    assert await manager.outcome(wrong["pairing_id"]) == "expired"
    assert await manager.outcome("pair_nothing") is None
    clock.now += 301
    assert await manager.outcome(expired["pairing_id"]) == "expired"
