"""Failures at launch explain themselves (issue 16, defect 7): with the port taken by another
program, `lmsp-desktop` shows the reason and what to do, instead of a window that vanishes."""

from __future__ import annotations

import argparse
import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication, QMessageBox

from lmsp_desktop.gui import launch
from tests.support.polling import until

pytestmark = pytest.mark.gui


def shown_box() -> QMessageBox | None:
    for widget in QApplication.topLevelWidgets():
        if isinstance(widget, QMessageBox) and widget.isVisible():
            return widget
    return None


async def test_port_in_use_says_so_and_exits_1(qtbot: Any, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        data.mkdir()
        args = argparse.Namespace(data_dir=data, models_dir=None, host=None, port=port)
        ini = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
        run = asyncio.ensure_future(launch.main(args, ini))
        await until(lambda: shown_box() is not None or run.done(), what="a message box")
        assert not run.done(), run.exception() if run.done() else None
        box = shown_box()
        assert box is not None
        assert f"Port {port} on 127.0.0.1 is in use by another program" in box.text()
        box.button(QMessageBox.StandardButton.Ok).click()
        assert await asyncio.wait_for(run, 10) == 1
        assert not (data / "service.json").exists()
