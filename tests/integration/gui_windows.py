"""A real core and its real window for the GUI integration tests (test_gui_*.py).

`open_app` starts a `Core` as `lmsp-desktop` does (store → recovery → model scan → service
on port 0) and shows the `MainWindow` over it; it can be opened again on the same data
folder to see what a restart keeps. By default the engine is the real llama.cpp one with the
demo model; tests that need a task to stay running for a known time pass the scripted
FakeEngine instead (the store, runner, registry and HTTP service stay real).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import shiboken6
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from lmsp_desktop.app import Core
from lmsp_desktop.cli import build_parser
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.clients import create_client
from lmsp_desktop.gui.main_window import MainWindow

MODEL = "smollm2-135m-instruct"


def launch_args(data_dir: Path, port: int = 0) -> argparse.Namespace:
    """What `lmsp-desktop --data-dir DIR --port PORT` hands `launch.main`, from the real
    parser: a flag added to the command line is never missing here (twice a hand-made
    Namespace lacked one, no_source then allow_origin, and five launch tests failed)."""
    return build_parser().parse_args(["--data-dir", str(data_dir), "--port", str(port)])


def slow_engine(tokens: int = 4000, delay: float = 0.02) -> FakeEngine:
    """A scripted engine whose tasks run for about tokens × delay seconds."""
    return FakeEngine([f" w{i}" for i in range(tokens)], token_delay=delay)


@contextlib.asynccontextmanager
async def open_app(
    qtbot: Any, data_dir: Path, *, ini: Path | None = None, **core_args: Any
) -> AsyncIterator[tuple[Core, MainWindow]]:
    # Free earlier windows' Python cycles here, on the Qt thread: collected later by chance in
    # a worker thread (the engine's, the store's) Qt warns that timers die in the wrong thread.
    gc.collect()
    core_args.setdefault("port", 0)
    core = Core(data_dir, **core_args)
    report = await core.open()
    await core.scan_models()
    await core.start_service()
    qsettings = QSettings(str(ini or data_dir / "gui.ini"), QSettings.Format.IniFormat)
    window = MainWindow(core, qsettings)
    qtbot.addWidget(window)
    try:
        window.show()
        await window.load()
        if report.items:
            window.show_recovery(report)
        yield core, window
    finally:
        window.quitting = True  # teardown closes the window: no question asked then
        if shiboken6.isValid(window.bridge):
            window.stop_updates()
            window.hide()
        await core.stop()


async def client_token(core: Core, name: str = "story-bot") -> str:
    _, token = await create_client(
        core.store.db, name, frozenset({"responses:read", "responses:write", "models:read"})
    )
    return token


async def post_background(core: Core, token: str, **body: Any) -> str:
    """A client's background task through the real HTTP API; returns its id."""
    body = {"model": MODEL, "input": "Tell me a long story.", "background": True, **body}
    async with (
        aiohttp.ClientSession(core.url) as http,
        http.post(
            "/v1/responses", json=body, headers={"Authorization": f"Bearer {token}"}
        ) as answer,
    ):
        created = await answer.json()
        assert answer.status == 202, created
    return str(created["id"])


def running_window() -> MainWindow | None:
    """The window an app started by `launch.main` shows, once it shows one."""
    for widget in QApplication.topLevelWidgets():
        if isinstance(widget, MainWindow) and widget.isVisible():
            return widget
    return None
