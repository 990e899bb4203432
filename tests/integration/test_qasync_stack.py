"""The Qt stack we ship survives a busy qasync loop (DESIGN.md: PySide6 6.12.0 dropped a
reference to None in QObject.killTimer on every qasync callback and crashed the app)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gui

SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    import qasync
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)

    async def busy() -> int:
        before = sys.getrefcount(None)
        for _ in range(50_000):
            await asyncio.sleep(0)  # one scheduled callback each (and a timer on Qt's side)
        return sys.getrefcount(None) - before

    with loop:
        drift = loop.run_until_complete(busy())
    print(drift)
    """
)


def test_fifty_thousand_loop_callbacks_keep_none_alive() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    drift = int(done.stdout.strip().splitlines()[-1])
    # A leak of one reference per callback would show as about -50,000.
    assert drift > -1000, f"references to None fell by {-drift}"
