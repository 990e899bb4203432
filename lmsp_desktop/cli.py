"""The `lmsp-desktop` command: the desktop app (no subcommand), `serve`, and admin commands."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sqlite3
import sys
from pathlib import Path

from lmsp_desktop import __version__
from lmsp_desktop.core.config import DEFAULT_PORT, default_data_dir
from lmsp_desktop.core.errors import LmspError

log = logging.getLogger(__name__)
# The codes of a start refused by its data directory: a full disk, or one it cannot write.
STORAGE_REFUSALS = ("storage_full", "storage_read_only")
WORKER_COMMAND = "engine-worker"  # core/engines/worker/client.py starts workers with it


def _add_service_flags(parser: argparse.ArgumentParser, *, sub: bool = False) -> None:
    # On the subcommand, flags default to SUPPRESS so they never overwrite the same flags
    # given before the subcommand (`lmsp-desktop --port 1 serve`).
    keep: object = argparse.SUPPRESS if sub else None
    parser.add_argument(
        "--models-dir",
        action="append",
        type=Path,
        default=argparse.SUPPRESS if sub else [],
        metavar="DIR",
        help="a folder of .gguf model files (repeatable)",
    )
    parser.add_argument(
        "--no-source",
        action="append",
        choices=["lmstudio", "ollama", "huggingface"],
        default=argparse.SUPPRESS if sub else [],
        metavar="SOURCE",
        help="do not look for models in this app's store: lmstudio, ollama or huggingface "
        "(repeatable; all three are looked in by default)",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=argparse.SUPPRESS if sub else [],
        metavar="ORIGIN",
        help="let browser pages from ORIGIN (e.g. http://localhost:3000) call the service "
        "(repeatable; no origin is allowed by default)",
    )
    parser.add_argument(
        "--max-context",
        type=int,
        default=keep,
        metavar="TOKENS",
        help="the longest context any model runs with, for every model (what Settings > Max "
        "context sets; 0: each model's trained context, at most 8192, fitted to memory). "
        "A shorter context loads faster and holds less memory",
    )
    parser.add_argument(
        "--host",
        default=keep,
        help="address to bind (default 127.0.0.1; anything else is reachable from other machines)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=keep,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)",
    )


def _add_version_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--version",
        action="version",
        version=f"lmsp-desktop {__version__} (SQLite {sqlite3.sqlite_version}, "
        f"Python {sys.version.split()[0]})",
    )


def build_parser() -> argparse.ArgumentParser:
    from lmsp_desktop.cli_admin import add_commands
    from lmsp_desktop.cli_tasks import add_task_commands

    parser = argparse.ArgumentParser(
        prog="lmsp-desktop",
        description="Run local language models with a durable task store: the desktop app, "
        "or the headless service with `serve`.",
    )
    _add_version_flag(parser)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the database and logs live (default: $LMSP_DATA_DIR or "
        "the platform's user data folder)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    _add_service_flags(parser)
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the service headless (no window)")
    _add_version_flag(serve)  # the README lists it among the flags of the app and serve alike
    _add_service_flags(serve, sub=True)
    add_commands(sub)
    add_task_commands(sub)
    _accept_everywhere(sub, parser)
    return parser


def _accept_everywhere(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], top: argparse.ArgumentParser
) -> None:
    """`--data-dir` and `--log-level` also work after any subcommand
    (`lmsp-desktop serve --data-dir D`), without overriding one given before it."""
    for parser in set(sub.choices.values()):
        for action in top._actions:
            if action.dest in ("data_dir", "log_level") and not any(
                a.dest == action.dest for a in parser._actions
            ):
                parser.add_argument(
                    *action.option_strings,
                    dest=action.dest,
                    type=action.type or str,
                    choices=action.choices,
                    default=argparse.SUPPRESS,
                    help=action.help,
                )
        for nested in parser._actions:
            if isinstance(nested, argparse._SubParsersAction):
                _accept_everywhere(nested, top)


async def serve(args: argparse.Namespace) -> int:
    from lmsp_desktop.app import Core

    core = Core(
        args.data_dir,
        model_dirs=args.models_dir,
        host=args.host,
        port=args.port,
        no_sources=args.no_source,
        allowed_origins=args.allow_origin,
        max_context=args.max_context,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stopped_by(sig: signal.Signals) -> None:
        core.stopped_by_signal = sig.name  # the next start's report names it
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped_by, sig)
    try:
        await core.start()
    except BaseException as exc:
        # Not for a full disk: the log file is on it (a line lost, and said lost on stderr).
        if isinstance(exc, LmspError) and exc.code != "storage_full":
            # main() says it on stderr; the log file must say it too, once: a service
            # manager's user reads the log, not the terminal.
            from lmsp_desktop.logs import LOG_FILE_ONLY

            log.error("could not start: %s", exc.message, extra=LOG_FILE_ONLY)
        # Report why the start failed, not a failure of the cleanup after it (each failed
        # stop step is logged with its traceback by Core.stop).
        try:
            await core.stop()
        except BaseException:
            log.warning("cleaning up after the failed start failed too; see above")
        raise
    from lmsp_desktop import service_loop

    service_loop.settle_collector()
    await stop.wait()
    await core.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one command. A reader that closes our stdout early (`lmsp-desktop tasks | head -2`)
    ends it quietly, as Python's documentation advises (signal.SIGPIPE notes): stdout is
    pointed at devnull, so the flush at exit cannot raise again, and the exit status is 1 (the
    output was cut short; with the pipeline's status from `head`, a shell sees none of it)."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # here, not at exit: an error then is printed past any handler
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [WORKER_COMMAND]:
        # Hidden: an engine worker process (the packaged app cannot run `python -m`).
        from lmsp_desktop.core.engines.worker.main import main as worker_main

        return worker_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.data_dir is None:
        args.data_dir = default_data_dir()
    args.data_dir = args.data_dir.expanduser()
    from lmsp_desktop.core.lock import storage_refusal
    from lmsp_desktop.logs import StartLeftovers

    leftovers = StartLeftovers(args.data_dir)
    try:
        code = _run_command(args)
    except LmspError as exc:
        if exc.code in STORAGE_REFUSALS:
            leftovers.remove()
        print(f"lmsp-desktop: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:  # a write in the data directory (logs, the lock, the database)
        refusal = storage_refusal(exc, args.data_dir)
        if refusal is None:
            raise
        leftovers.remove()
        print(f"lmsp-desktop: {refusal.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if getattr(getattr(args, "start_error", None), "code", None) in STORAGE_REFUSALS:
            leftovers.remove()  # the window said why in its dialog
    if code:  # a command that said its own failure (`token create` on a full disk)
        leftovers.remove(only_empty=True)
    return code


def _run_command(args: argparse.Namespace) -> int:
    from lmsp_desktop.logs import setup_logging

    if args.command == "serve":
        setup_logging(args.data_dir, args.log_level)
        from lmsp_desktop import service_loop

        return service_loop.run(serve(args))
    if args.command is None:
        from lmsp_desktop.gui.launch import run_gui

        try:
            setup_logging(args.data_dir, args.log_level)
        except LmspError as exc:  # said in the window's "could not start" dialog
            args.start_error = exc
        return int(run_gui(args))
    if args.command == "tasks":
        from lmsp_desktop.cli_tasks import run_tasks

        return run_tasks(args)
    from lmsp_desktop.cli_admin import run_admin

    return run_admin(args)
