"""The window on a data directory its disk refuses says why in its "could not start" box:
a full disk was "Something went wrong inside LMSP Desktop (reference …)", a read-only one a
black screen (the log file's OSError came before any window)."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QMessageBox

from lmsp_desktop import cli
from lmsp_desktop.gui import launch
from lmsp_desktop.logs import setup_logging
from tests.integration.gui_windows import launch_args
from tests.integration.test_gui_startup_failure import shown_box
from tests.support.polling import until
from tests.unit.test_data_dir_refusals import root_handlers_as_found  # noqa: F401 (fixture)

pytestmark = pytest.mark.gui


async def said_in_the_box(run: asyncio.Future[int]) -> str:
    await until(lambda: shown_box() is not None or run.done(), what="a message box")
    box = shown_box()
    assert box is not None, "the launch ended without showing why"
    text = box.text()
    ok = box.button(QMessageBox.StandardButton.Ok)
    await until(ok.isEnabled, what="OK armed")
    ok.click()
    assert await asyncio.wait_for(run, 10) == 1
    return text


async def test_a_full_disk_is_said_in_the_box(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"

    def full(fd: int, length: int) -> None:  # the lock's pid: a full tmpfs refuses it
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "ftruncate", full)
    ini = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    run = asyncio.ensure_future(launch.main(launch_args(data), ini))
    text = await said_in_the_box(run)
    assert text.startswith(f"The disk holding {data} is full"), text
    assert not (data / "lmsp.lock").exists()


async def test_a_log_file_it_cannot_write_is_said_in_the_box(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What cli._main hands the window when setup_logging was refused."""
    data = tmp_path / "data"
    real_mkdir = os.mkdir

    def read_only(path: Any, mode: int = 0o777, **kw: Any) -> None:
        if Path(path).is_relative_to(data):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        real_mkdir(path, mode, **kw)

    monkeypatch.setattr(os, "mkdir", read_only)
    args = launch_args(data)
    try:
        setup_logging(data, console=False)
    except Exception as exc:  # what cli._run_command catches (an LmspError)
        args.start_error = exc
    ini = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    text = await said_in_the_box(asyncio.ensure_future(launch.main(args, ini)))
    assert text.startswith(f"cannot write {data} (read-only file system). Mount it"), text


def test_the_whole_launch_on_a_full_disk_leaves_no_folder_behind(
    qapp: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lmsp-desktop --data-dir NEW` as run (cli.main, its own qasync loop): the box says
    the disk is full, exit 1, and the new folder, its logs/ and log file made before the
    lock was refused are gone once the box is closed."""
    data = tmp_path / "new" / "data"

    def full(fd: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "ftruncate", full)
    seen: list[str] = []

    def answer_the_box() -> None:
        box = shown_box()
        if box is None:
            QTimer.singleShot(20, answer_the_box)
            return
        seen.append(box.text())
        ok = box.button(QMessageBox.StandardButton.Ok)

        def click_when_armed() -> None:
            if ok.isEnabled():
                ok.click()
            else:
                QTimer.singleShot(50, click_when_armed)

        click_when_armed()

    QTimer.singleShot(0, answer_the_box)
    assert cli.main(["--data-dir", str(data), "--port", "0"]) == 1
    assert len(seen) == 1 and seen[0].startswith(f"The disk holding {data} is full"), seen
    assert not (tmp_path / "new").exists(), list(tmp_path.rglob("*"))
