"""`lmsp-desktop token revoke ID` (the twenty-first walk): people, and our own reviewer, guess
it after `token create`; argparse answered "invalid choice: 'revoke' (choose from 'create')".
It is now the same command as `clients revoke`, listed in `token --help`. Real CLI processes
on a real data directory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from lmsp_desktop.core.auth import authenticate
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage.store import Store
from tests.integration.serve_process import lmsp


async def works(data_dir: Path, token: str) -> bool:
    store = Store(data_dir)
    await store.open()
    try:
        await authenticate(store.db, f"Bearer {token}", "127.0.0.1")
        return True
    except LmspError:
        return False
    finally:
        await store.close()


def test_token_revoke_revokes_as_clients_revoke_does(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    made = lmsp("token", "create", "--name", "laptop", data_dir=data_dir)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    listed = lmsp("clients", "list", "--json", data_dir=data_dir)
    [client] = json.loads(listed.stdout)
    assert asyncio.run(works(data_dir, token))

    helped = lmsp("token", "--help", data_dir=data_dir)
    assert helped.returncode == 0
    assert "revoke" in helped.stdout and "create" in helped.stdout, helped.stdout

    revoked = lmsp("token", "revoke", client["id"], data_dir=data_dir)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout == f"Revoked {client['id']} (laptop); its token no longer works.\n"
    assert not asyncio.run(works(data_dir, token))
    [after] = json.loads(lmsp("clients", "list", "--json", data_dir=data_dir).stdout)
    assert after["revoked"]

    # The same answers as `clients revoke` for an id that is not there.
    for command in ("token", "clients"):
        missing = lmsp(command, "revoke", "client_nope", data_dir=data_dir)
        assert missing.returncode == 2 and "client_nope" in missing.stderr, missing.stderr
    assert (
        lmsp("token", "revoke", "client_nope", data_dir=data_dir).stderr
        == lmsp("clients", "revoke", "client_nope", data_dir=data_dir).stderr
    )


@pytest.mark.parametrize("command", ["token", "clients"])
def test_revoke_without_an_id_says_what_it_wants(tmp_path: Path, command: str) -> None:
    answer = lmsp(command, "revoke", data_dir=tmp_path / "data")
    assert answer.returncode == 2 and "ID" in answer.stderr, answer.stderr
