"""The headless admin commands on a real data directory, also while the service has it open."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from lmsp_desktop.cli_admin import add_commands, run_admin
from lmsp_desktop.core.auth import authenticate
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.storage.store import Store


def parse(data_dir: Path, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lmsp-desktop")
    parser.add_argument("--data-dir", type=Path)
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["--data-dir", str(data_dir), *argv])


def admin(data_dir: Path, *argv: str) -> int:
    return run_admin(parse(data_dir, *argv))


async def check_token(data_dir: Path, token: str) -> frozenset[str]:
    store = Store(data_dir)
    await store.open()
    try:
        return (await authenticate(store.db, f"Bearer {token}", "127.0.0.1")).scopes
    finally:
        await store.close()


def test_token_create_prints_a_working_token_once(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = admin(data_dir, "token", "create", "--name", "script", "--scopes", "models:read,admin")
    out, err = capsys.readouterr()
    assert code == 0
    token = out.strip()
    assert token.startswith("lmsp_") and "\n" not in token  # stdout is the token alone
    assert "shown only once" in err and token not in err
    assert asyncio.run(check_token(data_dir, token)) == frozenset({"models:read", "admin"})


def test_unknown_scopes_exit_2_with_a_message(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert admin(data_dir, "token", "create", "--name", "x", "--scopes", "models:read,root") == 2
    out, err = capsys.readouterr()
    assert out == "" and "root" in err and "--scopes" in err


def test_missing_arguments_exit_2(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse(data_dir, "token", "create")
    assert info.value.code == 2
    assert "--name" in capsys.readouterr().err


def test_commands_on_a_directory_without_data_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert admin(tmp_path / "nowhere", "clients", "list") == 2
    assert "no LMSP data" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()  # nothing was created by mistake


def test_clients_list_and_revoke(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    admin(data_dir, "token", "create", "--name", "laptop")
    token = capsys.readouterr().out.strip()
    asyncio.run(check_token(data_dir, token))  # marks it as seen from 127.0.0.1

    assert admin(data_dir, "clients", "list") == 0
    table = capsys.readouterr().out
    assert "laptop" in table and "127.0.0.1" in table and token[:9] in table
    assert token not in table

    assert admin(data_dir, "clients", "list", "--json") == 0
    [client] = json.loads(capsys.readouterr().out)
    assert client["last_seen_addr"] == "127.0.0.1"

    assert admin(data_dir, "clients", "revoke", client["id"]) == 0
    assert "Revoked" in capsys.readouterr().out
    with pytest.raises(LmspError):
        asyncio.run(check_token(data_dir, token))

    assert admin(data_dir, "clients", "revoke", "client_nope") == 2
    assert "client_nope" in capsys.readouterr().err


async def test_pairing_commands_work_while_the_service_runs(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    service = Store(data_dir)  # the running service holds the database open throughout
    await service.open()
    try:
        manager = PairingManager(service.db, interval=0)
        first = await manager.start("notebook", frozenset({"models:read", "admin"}), "10.0.0.4")
        second = await manager.start("tablet", frozenset({"models:read"}), "10.0.0.5")

        assert await asyncio.to_thread(admin, data_dir, "pairing", "list") == 0
        listing = capsys.readouterr().out
        assert first["user_code"] in listing and "notebook" in listing and "10.0.0.4" in listing

        code = first["user_code"].replace("-", "").lower()
        argv = ("pairing", "approve", code, "--scopes", "models:read")
        assert await asyncio.to_thread(admin, data_dir, *argv) == 0
        assert "Approved notebook" in capsys.readouterr().out
        token = await manager.poll(first["pairing_id"], first["pairing_secret"])
        assert token["scopes"] == ["models:read"]  # admin was asked for, not granted

        assert await asyncio.to_thread(admin, data_dir, "pairing", "deny", second["user_code"]) == 0
        with pytest.raises(LmspError) as info:
            await manager.poll(second["pairing_id"], second["pairing_secret"])
        assert info.value.code == "access_denied"

        assert await asyncio.to_thread(admin, data_dir, "pairing", "approve", "ZZZZ-ZZZZ") == 2
        assert "ZZZZ-ZZZZ" in capsys.readouterr().err
        assert await asyncio.to_thread(admin, data_dir, "pairing", "list") == 0
        assert "No pairing requests are waiting" in capsys.readouterr().out
    finally:
        await service.close()


def test_approving_more_than_asked_exits_2(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def begin() -> str:
        store = Store(data_dir)
        await store.open()
        try:
            started = await PairingManager(store.db).start("nb", frozenset({"models:read"}), None)
            return str(started["user_code"])
        finally:
            await store.close()

    code = asyncio.run(begin())
    assert admin(data_dir, "pairing", "approve", code, "--scopes", "admin") == 2
    assert "did not ask for admin" in capsys.readouterr().err
