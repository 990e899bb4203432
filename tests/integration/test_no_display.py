"""`lmsp-desktop` (the window) on a machine with no display: a new user's `make run` on a
server got Qt's "could not connect to display" and a core dump, and a data directory left
readable by others. It must say to run `serve` instead, and leave the directory 0700."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from lmsp_desktop.gui.launch import missing_display


def test_the_window_without_a_display_says_to_run_serve(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    data = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "no display" in done.stderr and "lmsp-desktop serve" in done.stderr, done.stderr
    assert "qt.qpa" not in done.stderr, done.stderr  # stopped before Qt tried
    assert stat.S_IMODE(data.stat().st_mode) == 0o700


def test_a_display_or_a_chosen_qt_platform_lets_the_window_start() -> None:
    assert missing_display("linux", {})
    assert not missing_display("linux", {"DISPLAY": ":0"})
    assert not missing_display("linux", {"WAYLAND_DISPLAY": "wayland-0"})
    assert not missing_display("linux", {"QT_QPA_PLATFORM": "offscreen"})
    assert not missing_display("darwin", {}) and not missing_display("win32", {})
