"""`lmsp-desktop models list|set|load|unload`: the local models the service knows and each one's
load settings (context, concurrent requests, KV cache type, GPU layers) with what loading it
would take; loading and unloading one in the running service.

`list` and `set` work on the store directly, while `serve` runs too (a setting applies at the
model's next load), on the models the service lists: the running one's list, else the one a
service started now would give (`listed_models`). `load` and `unload` ask the running
service (cli_service.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from lmsp_desktop.cli_model_check import why_not_run
from lmsp_desktop.cli_service import admin_token, call, refusal, service_url
from lmsp_desktop.core.config import Settings
from lmsp_desktop.core.engines.base import ALL_LAYERS, KV_TYPES
from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.models.fitting import ModelFitter, is_local
from lmsp_desktop.core.models.info import CHANGED, INVALID, MISSING, ModelInfo, name_text
from lmsp_desktop.core.models.memory import AUTO_CONTEXT_RULE, ModelSettings, gib
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.models.sources import SOURCE_LABELS
from lmsp_desktop.core.storage import model_settings as stored
from lmsp_desktop.core.storage.store import Store

LOADED = ("loaded", "loading")  # the running service's states of a model in memory
NOT_RUN = (CHANGED, MISSING, INVALID)  # the files a run refuses, each with its reason


def add_settings_commands(models_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`models list` and `models set`, under the `models` command."""
    mlist = models_sub.add_parser(
        "list", help="show the models, their load settings and memory estimates"
    )
    mlist.add_argument("--json", action="store_true", help="print JSON")
    mlist.set_defaults(admin_action="models.list")
    mset = models_sub.add_parser(
        "set",
        help="change how a model is loaded (applies at its next load)",
        description="Change how a model is loaded; the flags not given keep their value. "
        "The change applies at the model's next load.",
    )
    mset.add_argument("name", metavar="NAME", help="the model's id, as `models list` shows it")
    mset.add_argument(
        "--context",
        help=f"tokens per request, or auto (the default): {AUTO_CONTEXT_RULE}",
    )
    mset.add_argument("--parallel", help="concurrent requests, or default (the service's setting)")
    mset.add_argument("--kv-type", choices=KV_TYPES, help="KV cache type (q8_0: about half)")
    mset.add_argument(
        "--gpu-layers", help="layers on the GPU: auto (as many as fit), all, or a number"
    )
    mset.set_defaults(admin_action="models.set")
    for verb, what in (
        ("load", "load a model now in the running service (a model held after crashes too)"),
        ("unload", "unload a model from the running service (once its running tasks end)"),
    ):
        cmd = models_sub.add_parser(verb, help=what, description=what[0].upper() + what[1:] + ".")
        cmd.add_argument("name", metavar="ID", help="the model's id, as `models list` shows it")
        cmd.set_defaults(admin_action=f"models.{verb}")


def _number(value: str, flag: str, auto: str) -> int | None:
    if value == auto:
        return None
    try:
        return int(value)
    except ValueError:
        raise invalid(f"{flag} takes a number or {auto}; got {value!r}.", flag) from None


def _gpu_layers(value: str) -> int | None:
    if value == "all":
        return ALL_LAYERS
    return _number(value, "--gpu-layers", "auto")


def changed(current: ModelSettings, args: argparse.Namespace) -> ModelSettings:
    """`current` with the flags given applied."""
    out = current
    if args.context is not None:
        out = replace(out, context_length=_number(args.context, "--context", "auto"))
    if args.parallel is not None:
        out = replace(out, parallel=_number(args.parallel, "--parallel", "default"))
    if args.kv_type is not None:
        out = replace(out, kv_type=args.kv_type)
    if args.gpu_layers is not None:
        out = replace(out, gpu_layers=_gpu_layers(args.gpu_layers))
    return out


async def run_model_settings(action: str, args: argparse.Namespace, store: Store) -> int:
    if action in ("models.load", "models.unload"):
        return await load_or_unload(action.split(".")[1], args.name, store.data_dir)
    settings = (await store.settings()).validate()
    flag = running_max_context(store.data_dir)
    if flag is not None:
        # What the running service uses: its `--max-context` wins over the stored setting.
        settings = replace(settings, max_context=flag)
        print(
            f"The running service was started with --max-context {flag}: every model's "
            f"context is at most {flag} tokens while it runs.",
            file=sys.stderr,
        )
    fitter = _fitter(store, settings)
    infos, served = await listed_models(store, settings)
    if action == "models.set":
        info = next((i for i in infos if i.id == args.name), None)
        if info is None:
            raise invalid(
                f"There is no local model named {args.name!r}; `lmsp-desktop models list` "
                "shows their names.",
                "name",
            )
        current = await stored.get_settings(store.db, info.id)
        wanted = changed(current, args)
        await stored.save_settings(store.db, info.id, wanted)
        print(f"{info.id}: {wanted.describe()}. Applies at its next load.")
        print(_fit_line(await fitter.plan(info, wanted)))
        return 0
    rows = [await _row(fitter, store, info, served.get(info.id)) for info in infos]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print(rows)
    return 0


async def load_or_unload(verb: str, model_id: str, data_dir: Path) -> int:
    """`models load|unload ID`: POST /v1/models/{id}/load|unload to the service running on
    the data directory (LMSP_TOKEN, else a one-off admin token); a model is loaded by the
    service that runs it, so without one there is nothing to load into."""
    if not service_answers(data_dir):
        if verb == "unload":
            print(f"No service runs on {data_dir}: no model is loaded.")
            return 0
        print(
            f"No service runs on {data_dir}: a model is loaded by the service that runs it. "
            "Start `lmsp-desktop serve` (or the desktop app); a request loads the model too.",
            file=sys.stderr,
        )
        return 2
    url = service_url(data_dir)
    path = f"{url}/v1/models/{urllib.parse.quote(model_id, safe='')}/{verb}"
    async with admin_token(data_dir, f"lmsp-desktop models {verb}") as token:
        status, body = await asyncio.to_thread(call, path, token, "POST", None, 600)
    if status != 200:
        print(refusal(body), file=sys.stderr)
        return 2 if 400 <= status < 500 else 1
    if verb == "load":
        print(f"{body['id']} is loaded ({body.get('context_length') or '-'}-token context).")
    elif body.get("unload_pending"):
        print(f"{body['id']} is unloaded as soon as the tasks running on it end.")
    else:
        print(f"{body['id']} is unloaded.")
    return 0


def service_answers(data_dir: Path) -> bool:
    """Whether a service runs on `data_dir`: its service.json names a URL that answers."""
    try:
        announced = json.loads((data_dir / "service.json").read_text())
        url = f"{str(announced['url']).rstrip('/')}/v1/health"
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def running_max_context(data_dir: Path) -> int | None:
    """The `--max-context` of the service running on `data_dir` (its service.json, written at
    its start and removed at its stop), or None when none runs or it was started without the
    flag. Running means answering at the URL it announced: a service.json left by a killed
    service may name a pid some other process has since been given."""
    try:
        announced = json.loads((data_dir / "service.json").read_text())
        url = f"{str(announced['url']).rstrip('/')}/v1/health"
        with urllib.request.urlopen(url, timeout=2):
            pass
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cap = announced.get("max_context")
    return cap if isinstance(cap, int) and not isinstance(cap, bool) else None


def _fitter(store: Store, settings: Settings) -> ModelFitter:
    from lmsp_desktop.core.engines.llama_layout import LlamaLayout

    # The engine's layout rule without the engine: llama.cpp is not needed to list models.
    layout = LlamaLayout(n_threads=settings.threads(), parallel=settings.parallel_per_model)
    return ModelFitter(
        store.db,
        layout.context_shapes,
        default_parallel=lambda: settings.parallel_per_model,
        context_cap=lambda: settings.max_context,
    )


async def listed_models(store: Store, settings: Settings) -> tuple[list[ModelInfo], dict[str, str]]:
    """The local models the service lists (GET /v1/models, the Models page), by its rule
    (ModelRegistry.list_models): a model of a folder not looked in (an earlier run's
    `--models-dir`) or of a store switched off is kept in the table but not listed. Beside a
    running service, the ones it lists (its own run's `--models-dir` and `--no-source`
    included); without one, the ones a service started now would list (the settings' folders
    and sources), as `models verify` looks them up. With them, by id, the state the running
    service gives each (GET /v1/models: `loaded` while it has the model loaded); none
    without a service (nothing is loaded then)."""
    data_dir = store.data_dir
    served: dict[str, str] = {}
    if service_answers(data_dir):
        url = f"{service_url(data_dir)}/v1/models"
        async with admin_token(data_dir, "lmsp-desktop models list") as token:
            status, body = await asyncio.to_thread(call, url, token)
        if status != 200:
            raise LmspError(refusal(body), code="service_refused", status=status)
        served = {item["id"]: str(item["state"]) for item in body["data"]}
        rows = await store.db.fetchall("SELECT * FROM models ORDER BY id")
        infos = [ModelInfo.from_row(row) for row in rows if row["id"] in served]
    else:
        registry = ModelRegistry(
            store.db,
            [Path(d).expanduser() for d in settings.model_dirs],
            include_demo=False,  # nothing is scanned: the demo's row is listed as any other
            sources=settings.enabled_sources(),
        )
        try:
            infos = await registry.list_models()
        finally:
            await registry.close()
    return [info for info in infos if is_local(info)], served


def shown_state(info: ModelInfo, served: str | None) -> str:
    """A model's STATE as the Models page shows it: `loaded` (or `loading`) while the running
    service has it so (`served`: its GET /v1/models state; the page's Loaded column), else
    its file's (verified, unverified, changed, missing, invalid: the page's Status). A file
    that cannot run says so even while an earlier load of it is kept (as GET /v1/models)."""
    if served in LOADED and info.state not in NOT_RUN:
        return served
    return info.state


async def _row(
    fitter: ModelFitter, store: Store, info: ModelInfo, served: str | None = None
) -> dict[str, Any]:
    wanted = await stored.get_settings(store.db, info.id)
    state = shown_state(info, served)
    row: dict[str, Any] = {
        "id": info.id,
        # The other names its store gives the file (`smollm2:latest` beside `smollm2:135m`),
        # each of which runs it, where it was found and the file, as GET /v1/models and the
        # Models page say.
        "aliases": info.aliases,
        "source": info.source,
        "path": str(info.path),
        "state": state,
        "quantization": info.quantization,
        "size_bytes": info.size_bytes,
        "trained_context_length": info.context_length,
        "settings": {
            "context": wanted.context_length or "auto",
            "parallel": wanted.parallel or "default",
            "kv_type": wanted.kv_type,
            "gpu_layers": _gpu_text(wanted.gpu_layers),
        },
    }
    decided = await fitter.current(info)
    if decided is not None:
        row.update(
            context_length=decided.context_length,
            parallel=decided.settings.parallel,
            memory_estimate=decided.estimate.total,
            fit=decided.fit,
            reason=decided.reason or None,
        )
    # A file that cannot run: why (an invalid one's own reason, the Models page's and GET
    # /v1/models' words), in place of a fit that no load will need.
    observed = info.meta.get("observed_error")
    why = why_not_run(
        info.id,
        state,
        info.invalid_reason or info.missing_reason,
        observed if isinstance(observed, str) else None,
    )
    if why is not None:
        row["reason"] = why
    return row


def _gpu_text(layers: int | None) -> str:
    return "auto" if layers is None else "all" if layers < 0 else str(layers)


def _requests(parallel: int) -> str:
    return "1 request at a time" if parallel == 1 else f"{parallel} concurrent requests"


def _fit_line(decided: Any) -> str:
    words = {"fits": "fits", "tight": "tight", "wont_fit": "will not fit"}
    line = (
        f"Now it would load with a {decided.context_length}-token context, "
        f"{_requests(decided.settings.parallel)}: about {gib(decided.estimate.total)} "
        f"of the {gib(decided.budget.available)} available ({words[decided.fit]})."
    )
    return f"{line} {decided.reason}" if decided.reason else line


def _print(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("No local models yet. Add a folder with `lmsp-desktop serve --models-dir DIR`.")
        return
    header = [
        "NAME",
        "SOURCE",
        "STATE",
        "CONTEXT",
        "TRAINED",
        "PARALLEL",
        "KV",
        "GPU",
        "MEMORY",
        "FIT",
    ]
    table = [header]
    for r in rows:
        s = r["settings"]
        table.append(
            [
                name_text(r["id"], r["aliases"]),
                SOURCE_LABELS.get(r["source"], r["source"]),
                r["state"],
                f"{r.get('context_length', '-')} ({s['context']})",
                str(r["trained_context_length"] or "-"),
                f"{r.get('parallel', '-')} ({s['parallel']})",
                s["kv_type"],
                s["gpu_layers"],
                gib(r["memory_estimate"]) if r.get("memory_estimate") else "-",
                r.get("fit", "-"),
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for r in rows:
        if not r.get("reason"):
            continue
        if r["state"] in NOT_RUN:
            # Part of the list (the Models page shows it in the row), wrapped to 80 columns.
            print(
                textwrap.fill(f"{r['id']}: {r['state']}: {r['reason']}", 80, subsequent_indent="  ")
            )
        else:  # a fit's warning, as `models set` gives it
            print(f"{r['id']}: {r['reason']}", file=sys.stderr)
