"""A second launch brings the running window to the front (issue 16, GUI.md "Failures explain
themselves"): started again on the same data directory, `lmsp-desktop` does not fail on the
lock with "already running" but shows the window that runs (from the tray, or minimised)
and exits 0. The running app is `launch.main` with a real core; the second launch is a real
`lmsp-desktop` process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings

from lmsp_desktop.gui import launch
from lmsp_desktop.gui.main_window import MainWindow
from lmsp_desktop.gui.single_instance import server_name
from tests.integration.gui_windows import launch_args, running_window
from tests.support.polling import until

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("does not support raise")]


@contextlib.asynccontextmanager
async def running_app(tmp_path: Path) -> AsyncIterator[tuple[Path, MainWindow]]:
    """`lmsp-desktop --port 0` as it runs (launch.main), until its window quits."""
    data = tmp_path / "data"
    args = launch_args(data)
    ini = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    run = asyncio.ensure_future(launch.main(args, ini))
    window = await until(lambda: running_window() or run.done(), what="the window")
    assert isinstance(window, MainWindow), f"the app did not start: {run.result()}"
    try:
        yield data, window
    finally:
        window.quit()
        assert await asyncio.wait_for(run, 60) == 0


async def launch_again(data: Path) -> tuple[int, str]:
    """`lmsp-desktop --data-dir DATA` in a process of its own; its exit status and output."""
    second = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lmsp_desktop",
        "--data-dir",
        str(data),
        "--port",
        "0",
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(second.communicate(), 60)
    except TimeoutError:
        second.kill()
        out, _ = await second.communicate()
        pytest.fail(f"the second launch did not end (waiting on a dialog?): {out.decode()}")
    assert second.returncode is not None
    return second.returncode, out.decode()


async def test_a_second_launch_shows_the_window_from_the_tray_and_exits_0(
    qtbot: Any, tmp_path: Path
) -> None:
    async with running_app(tmp_path) as (data, window):
        window.hide()  # closed to the tray
        status, out = await launch_again(data)
        assert status == 0, out
        assert "already running" in out
        assert "--port" in out and "apply when it starts" in out  # launched with --port 0
        await until(window.isVisible, what="the window shown again")


async def test_a_second_launch_restores_the_minimised_window(qtbot: Any, tmp_path: Path) -> None:
    async with running_app(tmp_path) as (data, window):
        window.showMinimized()
        await until(window.isMinimized, what="minimised")
        status, out = await launch_again(data)
        assert status == 0, out
        await until(lambda: not window.isMinimized() and window.isVisible(), what="restored")


async def test_a_killed_windows_socket_does_not_stop_the_next_one(
    qtbot: Any, tmp_path: Path
) -> None:
    """A window killed with SIGKILL leaves its socket file: the next app takes the name over
    and later launches still find it."""
    data = tmp_path / "data"
    data.mkdir()
    left = socket.socket(socket.AF_UNIX)
    left.bind(server_name(data))  # bound, never listening, never removed: a dead window's
    left.close()
    async with running_app(tmp_path) as (_, window):
        window.hide()
        status, out = await launch_again(data)
        assert status == 0, out
        await until(window.isVisible, what="the window shown again")
