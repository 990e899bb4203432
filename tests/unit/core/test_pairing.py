"""The pairing manager against a real temporary store, with a hand-driven clock."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from lmsp_desktop.core import pairing as pairing_module
from lmsp_desktop.core.auth import authenticate
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.pairing import (
    CODE_ALPHABET,
    PairingManager,
    new_user_code,
    normalize_code,
)
from lmsp_desktop.core.storage.clients import list_clients
from lmsp_desktop.core.storage.store import Store

ASKED = frozenset({"models:read", "responses:read", "responses:write"})


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(store: Store, clock: Clock) -> PairingManager:
    return PairingManager(store.db, expires_in=300, interval=5, clock=clock)


async def error_of(call: object) -> LmspError:
    with pytest.raises(LmspError) as info:
        await call  # type: ignore[misc]
    return info.value


def test_user_codes_use_only_the_alphabet_and_every_letter_about_equally() -> None:
    counts: Counter[str] = Counter()
    for _ in range(2000):
        code = new_user_code()
        assert len(code) == 8 and set(code) <= set(CODE_ALPHABET)
        counts.update(code)
    assert set(counts) == set(CODE_ALPHABET)
    # 16000 draws, 800 expected per letter: a modulo-biased generator (randbits % 20) would
    # give the first 12 letters about 1000 and the others 500.
    assert max(counts.values()) < 950 and min(counts.values()) > 650


def test_rejection_sampling_redraws_values_past_the_alphabet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    draws = iter([31, 20, 0, 25, 19, 1, 2, 3, 4, 5, 6])
    monkeypatch.setattr(pairing_module.secrets, "randbits", lambda bits: next(draws))
    assert new_user_code() == "BZCDFGHJ"  # 31, 20 and 25 were thrown away, not wrapped


def test_codes_are_accepted_with_or_without_dash_in_any_case() -> None:
    assert normalize_code("wdjb-mjht") == "WDJBMJHT"
    assert normalize_code("WDJBMJHT") == "WDJBMJHT"
    assert normalize_code(" WDJB MJHT ") == "WDJBMJHT"
    assert normalize_code("WDJB-MJH") is None
    assert normalize_code("AEIO-UUUU") is None  # vowels are not in the alphabet


async def test_device_flow_grants_fewer_scopes_and_hands_the_token_out_once(
    manager: PairingManager, store: Store, clock: Clock
) -> None:
    changes: list[None] = []
    manager.listeners.append(lambda: changes.append(None))
    started = await manager.start("notebook", ASKED, "192.168.1.20")
    assert started["user_code"][4] == "-" and started["interval"] == 5
    assert started["expires_in"] == 300 and len(started["pairing_secret"]) >= 22
    assert changes == [None]

    [pending] = await manager.pending()
    assert pending["client_name"] == "notebook" and pending["address"] == "192.168.1.20"
    assert pending["user_code"] == started["user_code"]
    assert pending["expires_at"] == int(clock.now) + 300

    pid, secret = started["pairing_id"], started["pairing_secret"]
    assert (await error_of(manager.poll(pid, secret))).code == "authorization_pending"

    approved = await manager.approve(started["user_code"].lower(), frozenset({"models:read"}))
    assert approved["granted_scopes"] == ["models:read"]
    assert await manager.pending() == []

    clock.now += 5
    token = await manager.poll(pid, secret)
    assert token["scopes"] == ["models:read"] and token["token_type"] == "bearer"
    principal = await authenticate(store.db, f"Bearer {token['access_token']}", None)
    assert principal.client_id == token["client_id"]
    assert principal.scopes == frozenset({"models:read"})

    clock.now += 5
    again = await error_of(manager.poll(pid, secret))
    assert again.status == 400 and again.code == "invalid_grant"
    assert len(await list_clients(store.db)) == 1


async def test_approving_more_than_asked_is_refused(manager: PairingManager) -> None:
    started = await manager.start("nb", frozenset({"models:read"}), None)
    error = await error_of(manager.approve(started["user_code"], frozenset({"admin"})))
    assert (error.status, error.param) == (400, "scopes")
    assert "admin" in error.message


async def test_polling_faster_than_the_interval_gets_slow_down(
    manager: PairingManager, clock: Clock
) -> None:
    started = await manager.start("nb", ASKED, None)
    pid, secret = started["pairing_id"], started["pairing_secret"]
    assert (await error_of(manager.poll(pid, secret))).code == "authorization_pending"
    clock.now += 2
    slow = await error_of(manager.poll(pid, secret))
    assert slow.code == "slow_down" and slow.extra["interval"] == 10
    clock.now += 6  # 6 s is no longer enough: the interval grew by five seconds
    assert (await error_of(manager.poll(pid, secret))).code == "slow_down"
    clock.now += 16
    assert (await error_of(manager.poll(pid, secret))).code == "authorization_pending"


async def test_expired_requests_leave_the_list_and_answer_expired_token(
    manager: PairingManager, clock: Clock
) -> None:
    started = await manager.start("nb", ASKED, None)
    clock.now += 300
    assert await manager.pending() == []
    error = await error_of(manager.poll(started["pairing_id"], started["pairing_secret"]))
    assert error.code == "expired_token"
    assert (await error_of(manager.approve(started["user_code"]))).status == 404


async def test_denied_requests_answer_access_denied(manager: PairingManager) -> None:
    started = await manager.start("nb", ASKED, None)
    await manager.deny(started["pairing_id"])
    assert await manager.pending() == []
    error = await error_of(manager.poll(started["pairing_id"], started["pairing_secret"]))
    assert error.code == "access_denied"


async def test_ignored_requests_are_hidden_but_the_client_keeps_waiting(
    manager: PairingManager, clock: Clock
) -> None:
    started = await manager.start("nb", ASKED, None)
    await manager.ignore(started["user_code"])
    assert await manager.pending() == []
    error = await error_of(manager.poll(started["pairing_id"], started["pairing_secret"]))
    assert error.code == "authorization_pending"
    clock.now += 300
    error = await error_of(manager.poll(started["pairing_id"], started["pairing_secret"]))
    assert error.code == "access_denied"  # refused, not "expired" (which invites a retry)
    assert [r["state"] for r in await manager.pending(include_ignored=True)] == []  # expired


async def test_five_wrong_secrets_kill_the_pairing(manager: PairingManager) -> None:
    started = await manager.start("nb", ASKED, None)
    pid, secret = started["pairing_id"], started["pairing_secret"]
    await manager.approve(pid)
    for _ in range(5):
        assert (await error_of(manager.poll(pid, "guess"))).code == "invalid_grant"
    error = await error_of(manager.poll(pid, secret))  # the sixth try, with the right secret
    assert error.code == "access_denied"
    assert "5 wrong" in error.message


async def test_four_wrong_secrets_still_leave_the_right_one_working(
    manager: PairingManager,
) -> None:
    started = await manager.start("nb", ASKED, None)
    pid, secret = started["pairing_id"], started["pairing_secret"]
    await manager.approve(pid)
    for _ in range(4):
        await error_of(manager.poll(pid, "guess"))
    assert "access_token" in await manager.poll(pid, secret)


async def test_simultaneous_polls_hand_out_one_token(manager: PairingManager, store: Store) -> None:
    started = await manager.start("nb", ASKED, None)
    await manager.approve(started["user_code"])
    results = await asyncio.gather(
        *(manager.poll(started["pairing_id"], started["pairing_secret"]) for _ in range(5)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, dict) for r in results) == 1
    assert len(await list_clients(store.db)) == 1


async def test_claim_codes_work_once(manager: PairingManager, store: Store) -> None:
    made = await manager.create_claim_code(frozenset({"responses:read"}), expires_in=600)
    assert made["code"][4] == "-"
    token = await manager.claim(made["code"].replace("-", "").lower(), "phone", "10.0.0.9")
    assert token["scopes"] == ["responses:read"]
    [client] = await list_clients(store.db)
    assert client["name"] == "phone"
    error = await error_of(manager.claim(made["code"], "phone", "10.0.0.9"))
    assert (error.code, error.param) == ("invalid_grant", "code")


async def test_claim_codes_expire(manager: PairingManager, clock: Clock) -> None:
    made = await manager.create_claim_code(frozenset({"responses:read"}), expires_in=60)
    clock.now += 61
    assert (await error_of(manager.claim(made["code"], "p", None))).code == "invalid_grant"


async def test_five_wrong_claim_codes_kill_the_live_code(store: Store, clock: Clock) -> None:
    # A generous rate limit, so that what stops the sixth attempt is the kill rule.
    manager = PairingManager(store.db, clock=clock, attempts_burst=100)
    made = await manager.create_claim_code(frozenset({"responses:read"}))
    wrong = "BBBB-BBBB" if made["code"] != "BBBB-BBBB" else "CCCC-CCCC"
    for _ in range(5):
        await error_of(manager.claim(wrong, "attacker", "10.0.0.66"))
    error = await error_of(manager.claim(made["code"], "phone", "10.0.0.9"))
    assert error.code == "invalid_grant"


async def test_attempts_are_rate_limited_per_address(store: Store, clock: Clock) -> None:
    manager = PairingManager(store.db, clock=clock, attempts_burst=3, attempts_per_minute=6)
    for _ in range(3):
        await manager.start("nb", ASKED, "10.0.0.1")
    error = await error_of(manager.start("nb", ASKED, "10.0.0.1"))
    assert (error.status, error.code) == (429, "rate_limited")
    assert error.extra["retry_after"] == 10
    await manager.start("nb", ASKED, "10.0.0.2")  # other addresses are not affected
    clock.now += 10
    await manager.start("nb", ASKED, "10.0.0.1")  # one attempt refilled


async def test_pending_requests_survive_a_restart(data_dir: Path, clock: Clock) -> None:
    first = Store(data_dir)
    await first.open()
    started = await PairingManager(first.db, clock=clock).start("nb", ASKED, "10.1.1.1")
    await first.close()

    second = Store(data_dir)
    await second.open()
    try:
        manager = PairingManager(second.db, clock=clock)
        [pending] = await manager.pending()
        assert pending["user_code"] == started["user_code"]
        await manager.approve(started["user_code"])
        token = await manager.poll(started["pairing_id"], started["pairing_secret"])
        assert token["scopes"] == sorted(ASKED)
    finally:
        await second.close()


async def test_unknown_codes_name_the_next_step(manager: PairingManager) -> None:
    error = await error_of(manager.approve("ZZZZ-ZZZZ"))
    assert (error.status, error.code) == (404, "pairing_not_found")
    assert "pairing list" in error.message
