"""Headless administration: tokens, pairing requests and clients, on the store directly.

Each command opens the data directory's database, makes one short write transaction at most
and closes it, so it works while `serve` runs on the same directory (SQLite's busy timeout
covers the moment both write). The model commands whose work is the running service's
(`models pull|verify|rescan`) ask it over HTTP instead (cli_service.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from lmsp_desktop.cli_model_check import run_check
from lmsp_desktop.cli_model_settings import run_model_settings
from lmsp_desktop.cli_models import add_model_commands, run_models
from lmsp_desktop.cli_upstream import add_upstream_commands, run_upstream
from lmsp_desktop.core.auth import parse_scopes
from lmsp_desktop.core.config import database_path
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.pairing import PairingManager
from lmsp_desktop.core.scopes import DEFAULT_SCOPES as DEFAULT_SCOPE_NAMES
from lmsp_desktop.core.scopes import SCOPES
from lmsp_desktop.core.storage.clients import create_client, list_clients, revoke_client
from lmsp_desktop.core.storage.store import Store

COMMANDS = ("token", "pairing", "clients", "upstream", "models")
DEFAULT_SCOPES = ",".join(DEFAULT_SCOPE_NAMES)
SCOPES_HELP = f"comma-separated, from: {', '.join(SCOPES)}"


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `token`, `pairing` and `clients` to a parser's subcommands."""
    token = sub.add_parser("token", help="create and revoke bearer tokens for clients")
    token_sub = token.add_subparsers(dest="token_command", metavar="COMMAND", required=True)
    create = token_sub.add_parser("create", help="create a client and print its token once")
    create.add_argument("--name", required=True, help="the client's name, e.g. laptop-script")
    create.add_argument(
        "--scopes", default=DEFAULT_SCOPES, help=f"{SCOPES_HELP} (default: {DEFAULT_SCOPES})"
    )
    create.set_defaults(admin_action="token.create")
    # People (and a reviewer) guess `token revoke` after `token create`: the same command as
    # `clients revoke`, a token being its client's.
    _add_revoke(token_sub)

    pairing = sub.add_parser("pairing", help="answer pairing requests from clients")
    pairing_sub = pairing.add_subparsers(dest="pairing_command", metavar="COMMAND", required=True)
    plist = pairing_sub.add_parser("list", help="show pairing requests waiting for an answer")
    plist.add_argument("--json", action="store_true", help="print JSON")
    plist.set_defaults(admin_action="pairing.list")
    approve = pairing_sub.add_parser("approve", help="approve a request by its user code")
    approve.add_argument("code", metavar="CODE", help="the code the client shows (ABCD-EFGH)")
    approve.add_argument("--scopes", help=f"grant fewer scopes than asked ({SCOPES_HELP})")
    approve.set_defaults(admin_action="pairing.approve")
    deny = pairing_sub.add_parser("deny", help="deny a request by its user code")
    deny.add_argument("code", metavar="CODE")
    deny.set_defaults(admin_action="pairing.deny")

    clients = sub.add_parser("clients", help="list and revoke paired clients")
    clients_sub = clients.add_subparsers(dest="clients_command", metavar="COMMAND", required=True)
    clist = clients_sub.add_parser("list", help="show paired clients and when they were seen")
    clist.add_argument("--json", action="store_true", help="print JSON")
    clist.set_defaults(admin_action="clients.list")
    _add_revoke(clients_sub)

    add_upstream_commands(sub)
    add_model_commands(sub)


def _add_revoke(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`revoke ID`, under `clients` and under `token`: one command, one code path."""
    revoke = commands.add_parser("revoke", help="revoke a client's token at once")
    revoke.add_argument(
        "client_id", metavar="ID", help="the client's id (client_…, from `clients list`)"
    )
    revoke.set_defaults(admin_action="clients.revoke")


def run_admin(args: argparse.Namespace) -> int:
    """Run one admin command; 0 on success, 2 on a mistake the user can fix, 1 otherwise."""
    action = getattr(args, "admin_action", None)
    if action is None:
        print(
            "Name a command: token create|revoke, pairing list|approve|deny, clients list|revoke, "
            "upstream add|list|remove, models list|set|pull|verify|rescan.",
            file=sys.stderr,
        )
        return 2
    data_dir = Path(args.data_dir)
    if action == "models.pull":
        try:
            return run_models(args)
        except LmspError as exc:
            print(exc.message, file=sys.stderr)
            return 2 if 400 <= exc.status < 500 else 1
    if action not in ("token.create", "upstream.add") and not database_path(data_dir).exists():
        print(
            f"There is no LMSP data in {data_dir}. Start `lmsp-desktop serve` (or the desktop "
            "app) first, or point --data-dir at the directory it uses.",
            file=sys.stderr,
        )
        return 2
    try:
        if action in ("models.verify", "models.rescan"):
            return run_check(args)  # through the running service, if one runs
        return asyncio.run(_run(action, args, data_dir))
    except LmspError as exc:
        print(exc.message, file=sys.stderr)
        return 2 if 400 <= exc.status < 500 else 1


async def _run(action: str, args: argparse.Namespace, data_dir: Path) -> int:
    store = Store(data_dir)
    await store.open()
    try:
        return await _dispatch(action, args, store)
    finally:
        await store.close()


async def _dispatch(action: str, args: argparse.Namespace, store: Store) -> int:
    db = store.db
    if action.startswith("upstream."):
        return await run_upstream(action, args, store)
    if action.startswith("models."):
        return await run_model_settings(action, args, store)
    if action == "token.create":
        client, token = await create_client(db, args.name, parse_scopes(args.scopes, "--scopes"))
        print(token)
        print(
            f"Created client {client['id']} ({client['name']}) with scopes "
            f"{', '.join(client['scopes'])}. The token above is shown only once: store it now.",
            file=sys.stderr,
        )
        return 0
    if action == "clients.list":
        rows = await list_clients(db)
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            _print_clients(rows)
        return 0
    if action == "clients.revoke":
        client = await revoke_client(db, args.client_id)
        print(f"Revoked {client['id']} ({client['name']}); its token no longer works.")
        return 0
    manager = PairingManager(db)
    if action == "pairing.list":
        pending = await manager.pending(include_ignored=True)
        if args.json:
            print(json.dumps(pending, indent=2))
        else:
            _print_pending(pending)
        return 0
    if action == "pairing.approve":
        scopes = parse_scopes(args.scopes, "--scopes") if args.scopes is not None else None
        request = await manager.approve(args.code, scopes)
        print(
            f"Approved {request['client_name']} ({request['user_code']}) with scopes "
            f"{', '.join(request['granted_scopes'] or [])}. It gets its token at its next poll."
        )
        return 0
    if action == "pairing.deny":
        await manager.deny(args.code)
        print(f"Denied the pairing request {args.code}.")
        return 0
    raise AssertionError(f"unknown admin action {action}")


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def _when(at: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at)) if at else "never"


def _print_clients(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("No clients are paired yet. Create one with `lmsp-desktop token create`.")
        return
    _table(
        ["ID", "NAME", "SCOPES", "PAIRED", "LAST SEEN", "FROM", "TOKEN", "STATUS"],
        [
            [
                c["id"],
                c["name"],
                ",".join(c["scopes"]),
                _when(c["created_at"]),
                _when(c["last_seen_at"]),
                c["last_seen_addr"] or "-",
                f"{c['token_prefix']}…",
                "revoked" if c["revoked"] else "active",
            ]
            for c in rows
        ],
    )


def _print_pending(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("No pairing requests are waiting.")
        return
    now = time.time()
    _table(
        ["CODE", "CLIENT", "ADDRESS", "SCOPES", "STATE", "EXPIRES IN"],
        [
            [
                p["user_code"],
                p["client_name"],
                p["address"] or "-",
                ",".join(p["scopes"]),
                # ignored: the client still polls; it hears access_denied once this expires
                p["state"],
                f"{max(0, int(p['expires_at'] - now))} s",
            ]
            for p in rows
        ],
    )
