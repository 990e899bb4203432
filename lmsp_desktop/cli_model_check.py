"""`lmsp-desktop models verify NAME...|--all` and `models rescan`: the Models page's Verify
selected and Rescan, for a machine without the window.

Beside a running service (or the desktop app) they are its work: `POST /v1/models/{id}/verify`
and `POST /v1/models/rescan`, so that its own registry (and what it keeps in memory) sees the
result at once. Without one, `verify` holds the data directory and calls the registry's
verify itself, the very method the window's button calls; `rescan` has nothing to do then,
since a service's start scans the model folders.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lmsp_desktop.cli_service import admin_token, call, refusal, service_url
from lmsp_desktop.core.config import default_cache_dir
from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.lock import DataDirLock
from lmsp_desktop.core.models.digest_cache import DigestCache
from lmsp_desktop.core.models.info import CHANGED, INVALID, MISSING, OBSERVED
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.models.sources import SOURCES
from lmsp_desktop.core.storage.store import Store

# A verify reads the whole file (an 8 GB model: seconds to a minute), a rescan hashes what it
# finds new: the answer is waited for this long.
ANSWER_TIMEOUT_S = 3600.0
NEEDS_VERIFYING = (CHANGED, MISSING)  # what `--all` verifies: the files a run refuses


def add_check_commands(models_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`models verify` and `models rescan`, under the `models` command."""
    verify = models_sub.add_parser(
        "verify",
        help="hash model files again; a changed model runs again once its file matches",
        description="Hash each model's file again, as the Models page's Verify selected does: "
        "the file recorded when it was verified runs again; a file with other contents stays "
        "refused unless you accept it with --accept-new. Works beside a running service "
        "(through it) and without one.",
    )
    verify.add_argument(
        "names", nargs="*", metavar="NAME", help="model ids, as `models list` shows them"
    )
    verify.add_argument(
        "--all",
        action="store_true",
        help="every local model that is refused now as changed or missing",
    )
    verify.add_argument(
        "--accept-new",
        action="store_true",
        help="a file replaced on purpose: record its new contents as the model's",
    )
    verify.set_defaults(admin_action="models.verify")
    rescan = models_sub.add_parser(
        "rescan",
        help="look in the model folders and stores again (the running service's)",
        description="Look in the model folders and stores again, as the Models page's Rescan "
        "does: new files are listed and hashed, files gone are missing, a missing file put "
        "back runs again. A service's start scans by itself.",
    )
    rescan.set_defaults(admin_action="models.rescan")


def run_check(args: argparse.Namespace) -> int:
    """`models verify` or `models rescan`: 0 when done (every model named verified), 1 when a
    model stays refused, 2 on a mistake the user can fix (an unknown name)."""
    if args.admin_action == "models.verify":
        _check_usage(args)
    data_dir = Path(args.data_dir)
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except LmspError:  # a service holds the directory: verifying is its work
        return asyncio.run(_through_service(args, data_dir))
    try:
        if args.admin_action == "models.rescan":
            print(
                f"No service runs on {data_dir}: `lmsp-desktop serve` (or the app) scans the "
                "model folders when it starts. Nothing was read."
            )
            return 0
        return asyncio.run(_verify_here(args, data_dir))
    finally:
        lock.release()


def _check_usage(args: argparse.Namespace) -> None:
    if bool(args.names) == bool(args.all):
        raise invalid("Name the models to verify, or give --all (not both).", "names")
    if args.all and args.accept_new:
        raise invalid(
            "--accept-new takes model names, not --all: accept each replaced file on purpose.",
            "--accept-new",
        )


# -- through the running service -----------------------------------------------------------
async def _through_service(args: argparse.Namespace, data_dir: Path) -> int:
    url = service_url(data_dir)
    name = f"lmsp-desktop models {args.admin_action.removeprefix('models.')}"
    async with admin_token(data_dir, name) as token:
        return await asyncio.to_thread(_remote, url, token, args)


def _remote(url: str, token: str, args: argparse.Namespace) -> int:
    if args.admin_action == "models.rescan":
        status, body = call(f"{url}/v1/models/rescan", token, "POST", timeout=ANSWER_TIMEOUT_S)
        if status != 200:
            print(refusal(body), file=sys.stderr)
            return 2 if 400 <= status < 500 else 1
        _print_scanned([m for m in body["data"] if m.get("owned_by") == "local"])
        return 0
    names = args.names
    if args.all:
        status, body = call(f"{url}/v1/models", token)
        if status != 200:
            print(refusal(body), file=sys.stderr)
            return 1
        names = [
            m["id"]
            for m in body["data"]
            if m.get("owned_by") == "local" and m["state"] in NEEDS_VERIFYING
        ]
    outcomes = []
    for model_id in _announce(names):
        status, body = call(
            f"{url}/v1/models/{quote(model_id, safe='/:')}/verify",
            token,
            "POST",
            {"accept_new": True} if args.accept_new else None,
            timeout=ANSWER_TIMEOUT_S,
        )
        if status == 200:
            outcomes.append(_report(body))
        else:
            outcomes.append(_refused(model_id, status, refusal(body)))
    return max(outcomes, default=0)


# -- no service: this process verifies -------------------------------------------------------
async def _verify_here(args: argparse.Namespace, data_dir: Path) -> int:
    store = Store(data_dir)
    await store.open()
    try:
        settings = (await store.settings()).validate()
        off = {*settings.disabled_sources, *(getattr(args, "no_source", None) or [])}
        # As the service's registry: its folders are the settings' and those given here with
        # --models-dir, as to `serve` (a model of a folder not looked in is not listed). A
        # verify reads one recorded file and scans nothing. The per-machine digest cache
        # learns the digest, as a service's would.
        folders = [
            *(Path(d).expanduser() for d in settings.model_dirs),
            *(getattr(args, "models_dir", None) or []),
        ]
        registry = ModelRegistry(
            store.db,
            folders,
            include_demo=False,
            sources=[s for s in SOURCES if s not in off],
            digests=DigestCache(default_cache_dir() / "model-digests.json"),
        )
        try:
            return await _verify_with(registry, args)
        finally:
            await registry.close()
    finally:
        await store.close()


async def _verify_with(registry: ModelRegistry, args: argparse.Namespace) -> int:
    names = args.names
    if args.all:
        names = [
            m.id
            for m in await registry.list_models()
            if m.source != "upstream" and m.state in NEEDS_VERIFYING
        ]
    outcomes = []
    for model_id in _announce(names):
        try:
            info = await registry.verify(model_id, accept_new=args.accept_new)
        except LmspError as exc:
            message = exc.message
            if exc.code == "model_not_found":
                message = await _folder_not_given(registry, model_id) or message
            outcomes.append(_refused(model_id, exc.status, message))
            continue
        item = info.as_api()
        if info.state == CHANGED:
            item.update({k: info.meta[k] for k in OBSERVED if k in info.meta})
        outcomes.append(_report(item))
    return max(outcomes, default=0)


async def _folder_not_given(registry: ModelRegistry, model_id: str) -> str | None:
    """Why a model recorded in a folder this command does not look in is not found (a
    `--models-dir` given to an earlier `serve` only), and how to name the folder."""
    row = await registry.db.fetchone("SELECT meta FROM models WHERE id = ?", (model_id.lower(),))
    meta = json.loads(row["meta"]) if row is not None and row["meta"] else {}
    folder = meta.get("folder")
    if meta.get("source") != "folder" or not isinstance(folder, str):
        return None
    return (
        f"its folder {folder} is not one of the model folders (Settings, or --models-dir for "
        f"one run): lmsp-desktop --models-dir {shlex.quote(folder)} models verify {model_id}"
    )


# -- what it says ----------------------------------------------------------------------------
def _announce(names: list[str]) -> Iterator[str]:
    """Each name in turn, said on a terminal first (a large file takes a while to read)."""
    if not names:
        print("No model needs verifying: none is refused as changed or missing.")
    for name in names:
        if sys.stderr.isatty():
            print(f"Verifying {name}: reading its whole file…", file=sys.stderr, flush=True)
        yield name


def _report(model: dict[str, Any]) -> int:
    """One line on a verified model (stdout), or why it is still refused (stderr); 0 or 1."""
    name = model["id"]
    if model["state"] == "changed" and model.get("observed_error"):
        print(
            f"{name}: not verified: the file now at its path is not a whole model "
            f"({model['observed_error']}), so it is still refused. Put the verified file "
            f"back (digest {model['digest']}), then: lmsp-desktop models verify {name}",
            file=sys.stderr,
        )
        return 1
    if model["state"] == "changed":
        print(
            f"{name}: not verified: its file no longer matches the digest recorded when it was "
            f"verified ({model['digest']}; it now hashes to "
            f"{model.get('observed_digest') or 'another digest'}), so it is still refused. If "
            f"you replaced it on purpose: lmsp-desktop models verify {name} --accept-new; "
            "otherwise put the original file back.",
            file=sys.stderr,
        )
        return 1
    if model["state"] == "invalid":
        print(
            f"{name}: not verified: {model.get('reason')}. Replace it with a complete .gguf file.",
            file=sys.stderr,
        )
        return 1
    if model.get("verified_at") is None:
        print(
            f"{name}: not verified: its file could not be read whole (written to while it was "
            "read, or unreadable). Try again once nothing writes to it.",
            file=sys.stderr,
        )
        return 1
    print(f"{name}: verified ({model['digest']}).")
    return 0


def _refused(name: str, status: int, message: str) -> int:
    print(f"{name}: {message}", file=sys.stderr)
    return 2 if status in (400, 404) else 1


def why_not_run(
    model_id: str, state: str, reason: str | None = None, observed_error: str | None = None
) -> str | None:
    """Why a model in `state` is not run, as `models list` and `models rescan` say it after
    its state; None for a state that runs. `reason`: an invalid file's own reason, the core's
    words the Models page (Status tooltip) and GET /v1/models give (ModelInfo.invalid_reason);
    `observed_error`: why the file a verify found at a changed model's path is no model."""
    if state == CHANGED:
        why = f"not run until verified again (lmsp-desktop models verify {model_id})"
        if observed_error:
            why += f"; the file now at its path is not a whole model ({observed_error})"
        return why
    if state == MISSING:  # `reason`: a split model's parts gone (ModelInfo.missing_reason)
        return reason or "its file is gone"
    if state == INVALID:
        return reason or "it is not a GGUF model file"
    return None


def _print_scanned(models: list[dict[str, Any]]) -> None:
    count = "1 local model" if len(models) == 1 else f"{len(models)} local models"
    print(f"Rescanned the model folders and stores: {count}.")
    for model in models:
        state = model["state"]
        why = why_not_run(model["id"], state, model.get("reason"))
        if why is not None:
            word = f"{state}: {why}"
        elif model.get("verified_at") is None:
            word = "not verified yet"
        else:
            word = "verified"
        print(f"{model['id']}: {word}")
