"""`lmsp-desktop upstream add|list|remove`: OpenAI-compatible servers as executors.

The API key is read from an environment variable named with --api-key-env, never from the
command line (where it would land in the shell history and in `ps`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from typing import Any

from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.upstreams import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_S,
    add_upstream,
    list_upstreams,
    remove_upstream,
)

LIST_PROBE_TIMEOUT_S = 5.0


def add_upstream_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    upstream = sub.add_parser(
        "upstream", help="run tasks on OpenAI-compatible servers (vLLM, llama-server, Ollama…)"
    )
    usub = upstream.add_subparsers(dest="upstream_command", metavar="COMMAND", required=True)
    add = usub.add_parser("add", help="register a server; its models appear as NAME/<model>")
    add.add_argument("name", metavar="NAME", help="short name: a-z, 0-9, - and _")
    add.add_argument("url", metavar="URL", help="its OpenAI base URL, e.g. http://gpu:8000/v1")
    add.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="name of the environment variable holding its API key (never the key itself)",
    )
    add.add_argument(
        "--max-concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"generations sent to it at once (default {DEFAULT_CONCURRENCY})",
    )
    add.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds to wait to connect and between streamed chunks (default "
        f"{DEFAULT_TIMEOUT_S:g})",
    )
    add.add_argument("--replace", action="store_true", help="replace an upstream of that name")
    add.set_defaults(admin_action="upstream.add")
    ulist = usub.add_parser("list", help="show upstreams, whether they answer, their models")
    ulist.add_argument("--json", action="store_true", help="print JSON")
    ulist.add_argument("--no-probe", action="store_true", help="do not contact the upstreams")
    ulist.set_defaults(admin_action="upstream.list")
    remove = usub.add_parser("remove", help="forget an upstream (and its stored key)")
    remove.add_argument("name", metavar="NAME")
    remove.set_defaults(admin_action="upstream.remove")


def read_key(var: str | None) -> str | None:
    if var is None:
        return None
    key = os.environ.get(var)
    if not key:
        raise invalid(
            f"The environment variable {var} is not set or empty. Put the API key in it "
            f"(for example `read -s {var}; export {var}`) and run the command again.",
            "--api-key-env",
        )
    return key


async def run_upstream(action: str, args: argparse.Namespace, store: Store) -> int:
    # Here, not at the top: the client imports aiohttp (~0.15 s), and every command builds
    # the parser from this module.
    from lmsp_desktop.core.upstreams.catalog import UpstreamStatus
    from lmsp_desktop.core.upstreams.client import UpstreamClient

    db = store.db
    if action == "upstream.add":
        key = read_key(args.api_key_env)
        row = await add_upstream(
            db,
            args.name,
            args.url,
            key,
            max_concurrency=args.max_concurrency,
            timeout_s=args.timeout,
            replace=args.replace,
        )
        where = {
            "keyring": "its API key is in the OS keyring",
            "database": "its API key is in the 0600 database: there is no OS keyring here",
            "none": "no API key",
        }[row.key_store]
        print(
            f"Added upstream {row.name} at {row.base_url} ({where}); its models appear as "
            f"{row.name}/<model>. A running service picks it up within seconds."
        )
        client = UpstreamClient(row.name, row.base_url, key, LIST_PROBE_TIMEOUT_S)
        try:
            probe = await client.probe()
        finally:
            await client.close()
        if probe.reachable:
            names = ", ".join(f"{row.name}/{m['id']}" for m in probe.models) or "none"
            print(f"It answers ({probe.latency_ms:.0f} ms); its models: {names}.")
        else:
            print(
                f"Warning: it does not answer now ({probe.error}). Tasks for its models are "
                "retried, then fail with upstream_unavailable until it does.",
                file=sys.stderr,
            )
        return 0
    if action == "upstream.remove":
        await remove_upstream(db, args.name)
        print(f"Removed upstream {args.name}.")
        return 0
    rows = await list_upstreams(db, with_keys=not args.no_probe)
    probes: list[Any] = [None] * len(rows)
    if not args.no_probe:
        clients = [
            UpstreamClient(r.name, r.base_url, r.api_key, min(r.timeout_s, LIST_PROBE_TIMEOUT_S))
            for r in rows
        ]
        try:
            probes = list(await asyncio.gather(*(c.probe() for c in clients)))
        finally:
            for client in clients:
                await client.close()
    statuses = [
        UpstreamStatus(dataclasses.replace(r, api_key=None), p).public()
        for r, p in zip(rows, probes, strict=True)
    ]
    if args.json:
        print(json.dumps(statuses, indent=2))
    else:
        _print(statuses, probed=not args.no_probe)
    return 0


def _print(statuses: list[dict[str, Any]], *, probed: bool) -> None:
    if not statuses:
        print("No upstreams. Add one with `lmsp-desktop upstream add NAME URL`.")
        return
    header = ["NAME", "URL", "KEY", "MAX", "STATUS", "LATENCY", "MODELS"]
    lines = []
    for s in statuses:
        status = "-" if not probed else "up" if s["reachable"] else f"down: {s['error']}"
        latency = f"{s['latency_ms']:.0f} ms" if s["latency_ms"] is not None else "-"
        models = ", ".join(s["models"]) if s["models"] else "-"
        lines.append(
            [
                s["name"],
                s["base_url"],
                s["key_store"],
                str(s["max_concurrency"]),
                status,
                latency,
                models,
            ]
        )
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    for row in [header, *lines]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
