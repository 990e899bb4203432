"""`lmsp-desktop tasks [cancel ID…]`: the running service's tasks, as `ollama ps` or `lms ps`
show what runs (id, model, state, queue position, tokens, age), and cancelling them. A
running task whose prompt is still being read shows how far ("reading prompt 3,072/8,192
(37%)") in place of its tokens, one waiting behind another prompt's read says so ("waiting
to read its prompt (60 tokens)"), one resumed after a restart that it resumes ("resuming
(62 tokens so far)") until its next token comes. A download shows its bytes there as the
window does ("49.0 MiB / 93.8 MiB", "…, waiting for the hub until 16:41:31", "93.8 MiB" once
done).

Asked of the service running on the data directory over HTTP (GET /v1/tasks, POST
/v1/tasks/{id}/cancel), with `LMSP_TOKEN` or a one-off admin token (cli_service.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from lmsp_desktop.cli_model_settings import service_answers
from lmsp_desktop.cli_service import admin_token, call, refusal, service_url, token_client
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.scopes import ADMIN
from lmsp_desktop.core.views import PromptProgress, download_status, prompt_status

UNFINISHED = "queued,loading,running,cancelling"


def add_task_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tasks = sub.add_parser(
        "tasks",
        help="list the running service's unfinished and recent tasks; cancel tasks",
        description="List the unfinished tasks of the service running on the data directory, "
        "then the most recent others (newest first), or cancel tasks.",
    )
    tasks.add_argument(
        "--limit", type=int, default=20, metavar="N", help="how many tasks at most (20)"
    )
    tasks.add_argument("--json", action="store_true", help="print the task objects as JSON")
    tsub = tasks.add_subparsers(dest="tasks_command", metavar="COMMAND")
    cancel = tsub.add_parser(
        "cancel",
        help="cancel tasks by id (their partial output is kept)",
        description="Cancel tasks by id, whichever API created them (their partial output is "
        "kept in their events).",
    )
    cancel.add_argument("ids", nargs="+", metavar="ID", help="a task id (resp_…, chatcmpl-…)")


def run_tasks(args: argparse.Namespace) -> int:
    """0 on success, 2 on a mistake the user can fix, 1 otherwise."""
    data_dir = Path(args.data_dir)
    if not service_answers(data_dir):
        print(
            f"No service runs on {data_dir}. Tasks are listed and cancelled by the service "
            "that runs them: start `lmsp-desktop serve` (or the desktop app), or point "
            "--data-dir at the directory it uses.",
            file=sys.stderr,
        )
        return 2
    try:
        return asyncio.run(_with_service(args, data_dir))
    except LmspError as exc:
        print(exc.message, file=sys.stderr)
        return 2 if 400 <= exc.status < 500 else 1


async def _with_service(args: argparse.Namespace, data_dir: Path) -> int:
    url = service_url(data_dir)
    async with admin_token(data_dir, "lmsp-desktop tasks") as token:
        if args.tasks_command == "cancel":
            return await asyncio.to_thread(_cancel, url, token, args.ids, _not_admin(data_dir))
        listed = await asyncio.to_thread(_list, url, token, args)
    client = token_client(data_dir)
    if client is not None and ADMIN not in client[1] and not args.json:
        # A client's token lists that client's tasks only (GET /v1/tasks): say so, or an
        # empty or short list reads as the service's whole work.
        print(
            f"Only the tasks of the client {client[0]} are listed: LMSP_TOKEN is its token. "
            "Unset LMSP_TOKEN to list every client's (the command then makes an admin token "
            "of its own for its run).",
            file=sys.stderr,
        )
    return listed


def _list(url: str, token: str, args: argparse.Namespace) -> int:
    limit = max(1, min(args.limit, 100))
    unfinished = _get(url, token, f"/v1/tasks?state={UNFINISHED}&limit=100")
    recent = _get(url, token, f"/v1/tasks?limit={limit}")
    seen = {t["id"] for t in unfinished}
    tasks = (unfinished + [t for t in recent if t["id"] not in seen])[: max(limit, len(seen))]
    if args.json:
        print(json.dumps(tasks, indent=2))
        return 0
    if not tasks:
        print("No tasks yet.")
        return 0
    now = time.time()
    header = ["ID", "MODEL", "KIND", "STATE", "QUEUE", "TOKENS", "AGE"]
    rows = [
        [
            t["id"],
            t["model"],
            t.get("kind") or "response",
            t["state"],
            str(t["queue_position"]) if t.get("queue_position") else "-",
            _tokens(t),
            _age(now - t["created_at"]),
        ]
        for t in tasks
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _tokens(task: dict[str, Any]) -> str:
    """Output tokens (an embedding's input tokens, marked "input": it generates none; a
    download's bytes);
    while a running task's prompt is read, how far (llama.cpp reads a long prompt for
    seconds to minutes before the first token), or that it waits for another's read to end
    before its own begins; a task resumed after a restart, that it resumes (or waits to)."""
    progress = task.get("prompt_progress")
    done = task.get("output_tokens") or 0
    if progress and done:
        # Resumed after a restart: the engine reads its prompt and then its earlier tokens
        # again, one at a time as they were made, before any new one. The read's figure
        # said "reading prompt 0/41 (0%)" all that while (a short prompt is read in one
        # chunk, and no report follows it until the first new token).
        doing = "waiting to resume" if progress.get("waiting") else "resuming"
        return f"{doing} ({done:,} tokens so far)"
    if progress:
        return prompt_status(
            PromptProgress(
                progress["total"],
                progress["cached"],
                progress["processed"],
                bool(progress.get("waiting")),
            )
        )
    if task.get("kind") == "download":  # its bytes, as the window's task table says them
        return download_status(task["state"], task.get("download_progress")) or "-"
    if task.get("kind") == "embedding":  # it reads its input and generates nothing
        return f"{task.get('input_tokens') or 0:,} input"
    return str(task.get("output_tokens") or 0)


def _get(url: str, token: str, path: str) -> list[dict[str, Any]]:
    status, body = call(f"{url}{path}", token)
    if status != 200:
        raise LmspError(_message(body, status), code="service_error", status=status)
    return list(body["data"])


def _not_admin(data_dir: Path) -> str | None:
    """The name of the client whose token LMSP_TOKEN is, when it is not an admin's (it then
    sees and cancels its own client's tasks only); else None."""
    client = token_client(data_dir)
    return client[0] if client is not None and ADMIN not in client[1] else None


def _cancel(url: str, token: str, ids: list[str], not_admin: str | None = None) -> int:
    worst = 0
    for task_id in ids:
        quoted = urllib.parse.quote(task_id, safe="")
        status, body = call(f"{url}/v1/tasks/{quoted}/cancel", token, "POST")
        if status == 200:
            word = "cancelled" if body["state"] == "cancelled" else "being cancelled"
            print(f"{task_id}: {word} (its partial output is kept).")
            continue
        message = _message(body, status)
        if status == 404 and not_admin is not None:
            # The service cannot say whose the task is; the shell's LMSP_TOKEN is the cause.
            message += (
                f" LMSP_TOKEN is the token of the client {not_admin}: unset it to cancel any "
                "client's task (the command then makes an admin token of its own for its run)."
            )
        print(f"{task_id}: {message}", file=sys.stderr)
        worst = max(worst, 2 if 400 <= status < 500 else 1)
    return worst


def _message(body: Any, status: int) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return refusal(body)  # LMSP_TOKEN's missing scope named as the other commands do
    return f"HTTP {status}"


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"
