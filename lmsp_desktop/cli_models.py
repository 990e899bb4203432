"""`lmsp-desktop models pull REPO[:QUANT|:FILE]`: a model from the Hugging Face hub.

When a service (or the desktop app) runs on the data directory, the pull is a task of that
service: created with `POST /v1/models/pull`, followed through its events, shown in the
window, resumed by it after a restart (its token: cli_service.admin_token; the HF_TOKEN of
this shell is lent to the service for that pull, so a gated repo works as with
`hf download` whatever the service was started with). When none runs,
the command holds the data directory itself and downloads as the service would (same task,
same events); stopped with Ctrl-C, the task is left running and continues from the bytes on
disk when the service next starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmsp_desktop.cli_model_check import add_check_commands, why_not_run
from lmsp_desktop.cli_model_settings import add_settings_commands
from lmsp_desktop.cli_service import admin_token, call, refusal, service_url
from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.downloads.token import HUB_TOKEN_HEADER
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.lock import DataDirLock
from lmsp_desktop.core.models.gguf_meta import quant_from_filename
from lmsp_desktop.core.models.ids import source_model_id
from lmsp_desktop.core.models.info import INVALID, MISSING, UNVERIFIED
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.sizes import human_size
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.logs import setup_logging

POLL_S = 0.5
UNLISTED = "unlisted"  # a pulled file the service does not list (Pulled.state)
TERMINAL = ("completed", "failed", "cancelled", "incomplete")


def add_model_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    models = sub.add_parser(
        "models",
        help="list models, set how each is loaded, get models from the hub, verify them again",
    )
    msub = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)
    add_settings_commands(msub)
    pull_cmd = msub.add_parser(
        "pull",
        help="download a GGUF model into the Hugging Face cache (a task of the running service)",
    )
    pull_cmd.add_argument(
        "reference",
        metavar="REPO[:QUANT|:FILE]",
        help="e.g. bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M; hf.co/… and huggingface.co "
        "addresses of a repo or a file work too",
    )
    pull_cmd.add_argument(
        "--revision",
        default="main",
        help="branch, tag or commit (main); a pasted …/blob/REV/FILE address names its own",
    )
    pull_cmd.add_argument(
        "--detach", action="store_true", help="print the task id and return (service only)"
    )
    pull_cmd.set_defaults(admin_action="models.pull")
    add_check_commands(msub)


def run_models(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except LmspError:  # a service holds the directory: the pull is its task
        return asyncio.run(_through_service(args, data_dir))
    try:
        return asyncio.run(_here(args, data_dir))
    finally:
        lock.release()


# -- through the running service -----------------------------------------------------------
async def _through_service(args: argparse.Namespace, data_dir: Path) -> int:
    url = service_url(data_dir)
    async with admin_token(data_dir, "lmsp-desktop models pull") as token:
        return await asyncio.to_thread(_follow_remote, url, token, args)


def _follow_remote(url: str, token: str, args: argparse.Namespace) -> int:
    # As written: the service reads it as this process would (parse_reference), the
    # revision a pasted file address names included (…/blob/v2/x.gguf pulls v2).
    body: dict[str, Any] = {"repo": args.reference.strip(), "revision": args.revision}
    # The token this user set works as it does for `hf download`: lent to the service for
    # this pull only (a header, over loopback; the service keeps it in memory, never stored).
    hub = os.environ.get("HF_TOKEN", "").strip()
    status, task = call(
        f"{url}/v1/models/pull",
        token,
        "POST",
        body,
        headers={HUB_TOKEN_HEADER: hub} if hub else None,
    )
    if status != 202:
        print(refusal(task), file=sys.stderr)
        return 2 if 400 <= status < 500 else 1
    print(f"Downloading {task['model']} as task {task['id']} of the service at {url}.")
    if args.detach:
        return 0
    after, shown = 0, Progress(task["model"])
    try:
        while True:
            status, page = call(f"{url}/v1/tasks/{task['id']}/events?after={after}", token)
            for event in page.get("data", []):
                after = event["sequence_number"]
                shown.event(event)
            status, current = call(f"{url}/v1/tasks/{task['id']}", token)
            if current["state"] in TERMINAL and not page.get("has_more"):
                return shown.end(current, _listed(url, token, current, task["model"]))
            time.sleep(POLL_S)
    except LmspError as exc:
        if exc.code != "service_unavailable":
            raise
        # The service stopped (killed, quit): the download is a durable task of its store,
        # picked up where it stopped at the next start (walkA20: "try again in a moment"
        # said nothing of the 64 MiB already fetched).
        print(
            f"\nThe service at {url} stopped answering during the download (task "
            f"{task['id']}). What was fetched is kept: the download goes on when the service "
            "or the window starts again (`lmsp-desktop tasks` shows it).",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            f"\nThe download goes on in the service (task {task['id']}). Cancel it in the "
            f"window, or: curl -X POST {url}/v1/tasks/{task['id']}/cancel -H "
            '"Authorization: Bearer $LMSP_TOKEN"',
            file=sys.stderr,
        )
        return 130


# -- no service: this process downloads ------------------------------------------------------
async def _here(args: argparse.Namespace, data_dir: Path) -> int:
    # The download's end and retries go to the data directory's log, as the service's would
    # (none writes it meanwhile: this command holds the directory); the terminal gets the
    # command's own lines.
    setup_logging(data_dir, getattr(args, "log_level", "INFO"), console=False)
    store = Store(data_dir)
    await store.open()
    # The rows of files this pull writes anew are reset to new files, which the service's
    # next start verifies (a model pulled again is not `changed`); it scans nothing here.
    registry = ModelRegistry(store.db, [], include_demo=False)
    written: list[Path] = []

    async def downloaded(paths: list[Path]) -> None:
        written.extend(paths)
        await registry.downloaded(paths)

    manager = DownloadManager(store.tasks, on_complete=downloaded)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    try:
        task = await pull(store.tasks, args.reference.strip(), revision=args.revision)
        print(f"Downloading {task['model']} (task {task['id']}; no service is running).")
        shown = Progress(task["model"])
        running = asyncio.create_task(manager.run(task["id"]))
        after = 0
        while not running.done():
            waiting = asyncio.create_task(stop.wait())
            await asyncio.wait([running, waiting], timeout=POLL_S, return_when="FIRST_COMPLETED")
            waiting.cancel()
            for event in await store.tasks.events(task["id"], after):
                after = event["sequence_number"]
                shown.event(event)
            if stop.is_set():
                await manager.stop()
                print(
                    "\nStopped. The task stays unfinished: it continues from the bytes on disk "
                    "when `lmsp-desktop serve` or the app starts next.",
                    file=sys.stderr,
                )
                return 130
        for event in await store.tasks.events(task["id"], after):
            shown.event(event)
        row = await store.tasks.get(task["id"])
        pulled = await asyncio.to_thread(_read_here, task["model"], written)
        return shown.end(
            {"state": row["state"], "error": json.loads(row["error"] or "null")}, pulled
        )
    except LmspError as exc:
        print(exc.message, file=sys.stderr)
        return 2 if 400 <= exc.status < 500 else 1
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        with contextlib.suppress(Exception):
            await manager.stop()
        await store.close()


@dataclass(frozen=True)
class Pulled:
    """The pulled model as the service lists it (GET /v1/models/{id}): its id, its state and,
    for a file that cannot run, the core's reason (ModelInfo.invalid_reason)."""

    model_id: str
    state: str
    reason: str | None = None


def _listed(url: str, token: str, task: dict[str, Any], name: str) -> Pulled | None:
    """The completed pull's model as the service lists it: a download completes once the
    service has listed and checked its file (DownloadManager calls on_complete first);
    UNLISTED if it does not list it (its Hugging Face source switched off). None if the
    download did not complete."""
    model_id = pulled_model_id(name)
    if task["state"] != "completed" or model_id is None:
        return None
    status, item = call(f"{url}/v1/models/{urllib.parse.quote(model_id, safe='')}", token)
    if status == 404:
        return Pulled(model_id, UNLISTED)
    if status != 200:
        return None
    return Pulled(str(item["id"]), str(item["state"]), item.get("reason"))


def _read_here(name: str, written: list[Path]) -> Pulled | None:
    """Without a service, what its next start will find in the pulled file: the header the
    scan reads (scan_rows.read_meta), whose error becomes the model's invalid reason. Its
    sha256 is the hub's already (the download checked it); the service verifies it again."""
    from lmsp_desktop.core.models.scan_rows import read_gone_or_meta

    model_id = pulled_model_id(name)
    if not written or model_id is None:
        return None
    header = read_gone_or_meta(written[0])
    if header is None:  # deleted since it was written: missing, not "not a model"
        return Pulled(model_id, MISSING)
    error = header[1].get("error")
    return Pulled(model_id, INVALID, str(error)) if error else Pulled(model_id, UNVERIFIED)


class Progress:
    """One line that updates in place on a terminal (a line per update otherwise), and the
    download's end."""

    def __init__(self, model: str) -> None:
        self.tty = sys.stdout.isatty()
        self.model = model  # the task's `repo:QUANT` or `repo:file`

    def event(self, event: dict[str, Any]) -> None:
        if event["type"] != "download.progress":
            return
        done, total = event["bytes_done"], event["bytes_total"] or 0
        percent = f"{100 * done / total:5.1f} %" if total else ""
        speed = event.get("bytes_per_s")
        rate = f" {human_size(speed)}/s" if speed else ""
        # The window's units (binary, named as such): "768.0 KiB / 3.0 MiB", not "0.8 / 3.1 MB".
        line = f"{human_size(done):>10} / {human_size(total)} {percent}{rate}"
        if event.get("retry_at"):  # the hub cannot be reached: the service tries again
            at = time.strftime("%H:%M:%S", time.localtime(event["retry_at"]))
            line = f"{line} waiting for the hub, next try at {at}"
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", flush=True)

    def end(self, task: dict[str, Any], pulled: Pulled | None = None) -> int:
        """Say how the download ended; its exit status. `pulled`: the model as listed after
        it (a file that cannot run is said as `models list` says it, and fails the pull)."""
        if self.tty:
            print()
        if task["state"] == "completed":
            why = why_not_run(pulled.model_id, pulled.state, pulled.reason) if pulled else None
            if pulled is not None and why is not None:
                print(
                    f"Downloaded {self.model} into the Hugging Face cache (its sha256 is the "
                    f"hub's), but it cannot run:\n{pulled.model_id}: {pulled.state}: {why}",
                    file=sys.stderr,
                )
                return 1
            model_id = pulled.model_id if pulled else pulled_model_id(self.model)
            use = f" Use it as the model {model_id}." if model_id else ""
            if pulled is not None and pulled.state == UNLISTED:
                use = (
                    f" The service does not list it as {model_id}: is its Hugging Face source "
                    "switched off (Settings, or serve --no-source huggingface)?"
                )
            print(f"Done: verified against the hub's sha256, in the Hugging Face cache.{use}")
            return 0
        if task["state"] == "cancelled":
            print(
                f"The download of {self.model} was cancelled; its partial file is deleted. "
                "Pull again to start over.",
                file=sys.stderr,
            )
            return 1
        error = task.get("error") or {}
        message = error.get("message") or "no reason was given (see the service's log)"
        print(f"The download of {self.model} {task['state']}: {message}", file=sys.stderr)
        return 1


def pulled_model_id(model: str) -> str | None:
    """The id a pulled `repo:QUANT` or `repo:file` is listed by once the service has
    scanned it (as the Hugging Face source names a file in the cache)."""
    repo, _, selector = model.partition(":")
    if selector.lower().endswith(".gguf"):
        name = selector.rsplit("/", 1)[-1]
        selector = quant_from_filename(name) or name[: -len(".gguf")]
    return source_model_id(repo.split("/"), selector or None)
