"""Quitting the app stops the core even when the window's own teardown fails: the next launch
finds the data directory free and no `service.json` left behind, as after any clean quit."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings

from lmsp_desktop.core.lock import DataDirLock
from lmsp_desktop.gui import launch
from lmsp_desktop.gui.main_window import MainWindow
from tests.integration.gui_windows import launch_args, running_window
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_a_failing_window_teardown_still_stops_the_core(
    qtbot: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    args = launch_args(data)
    ini = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    run = asyncio.ensure_future(launch.main(args, ini))
    window = await until(lambda: running_window() or run.done(), what="the window")
    assert isinstance(window, MainWindow), f"the app did not start: {run.result()}"
    assert (data / "service.json").exists()

    def broken_close() -> None:
        raise RuntimeError("the bridge failed to close")

    window.bridge.close = broken_close  # type: ignore[method-assign]
    window.quit()
    with caplog.at_level(logging.ERROR):
        status = await asyncio.wait_for(run, 60)

    assert status == 1  # not a clean quit, and the log says why
    assert "the bridge failed to close" in caplog.text
    assert not (data / "service.json").exists()  # the core stopped anyway
    lock = DataDirLock(data)
    lock.acquire()  # the next launch can take the data directory
    lock.release()
