"""`lmsp-desktop` without a subcommand: the core and the window on one qasync loop."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import socket
import sys
import time
from functools import partial
from pathlib import Path

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QCheckBox, QMessageBox

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.shutdown import StopSteps
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.format import app_icon
from lmsp_desktop.gui.single_instance import WindowServer, hand_over

log = logging.getLogger(__name__)
# A failed start shows its reason within a second of the launch, often while a key is still in
# flight (the Enter that started it, a held key's repeat): such a key on an armed OK button
# closes the box before anyone reads it, and the window seems to vanish. So OK takes no key or
# click this soon.
ARM_DELAY_MS = 1000


async def ask(box: QMessageBox) -> None:
    """Show a message box and wait for it without a nested event loop (no exec())."""
    closed = asyncio.Event()
    box.finished.connect(lambda _: closed.set())
    box.open()
    await closed.wait()


def is_lock_refusal(exc: BaseException) -> bool:
    return isinstance(exc, LmspError) and exc.code == "data_dir_in_use"


async def hand_over_soon(data_dir: Path, within_s: float = 3.0) -> bool:
    """The data directory is locked: if it is a window still starting up, wait for it to
    listen and bring it to the front (False when it never answers: `serve`, say)."""
    deadline = time.monotonic() + within_s
    while True:
        if hand_over(data_dir, wait_ms=500):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.2)


def failure_box(text: str, retry: str | None = None, keep: str | None = None) -> QMessageBox:
    """Why the app could not start, with OK armed only after ARM_DELAY_MS; with `retry`, a
    button of that title first (the default) and OK titled Quit; with `keep`, a check box of
    that title (unticked, armed with the buttons: a Space in flight must not tick it)."""
    box = QMessageBox(
        QMessageBox.Icon.Critical,
        "LMSP Desktop could not start",
        text,
        QMessageBox.StandardButton.Ok,
    )
    buttons = [box.button(QMessageBox.StandardButton.Ok)]
    if retry is not None:
        buttons[0].setText("Quit")
        again = box.addButton(retry, QMessageBox.ButtonRole.AcceptRole)
        buttons.append(again)
        box.setDefaultButton(again)
        box.setEscapeButton(buttons[0])

    if keep is not None:
        check = QCheckBox(keep, box)  # the box its parent: a bare temporary was freed at once
        box.setCheckBox(check)
        buttons.append(check)

    def arm() -> None:
        for button in buttons:
            button.setEnabled(True)

    for button in buttons:
        button.setEnabled(False)
    QTimer.singleShot(ARM_DELAY_MS, box, arm)
    return box


def free_port_near(host: str, port: int, tries: int = 50) -> int | None:
    """The first port after `port` that `host` can listen on now (one a user can remember and
    type into a client), or None."""
    for candidate in range(port + 1, min(port + 1 + tries, 65536)):
        try:
            infos = socket.getaddrinfo(host or None, candidate, type=socket.SOCK_STREAM)
            with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
                probe.bind(infos[0][4])
        except OSError:
            continue
        return candidate
    return None


def port_in_use_text(host: str, port: int, other: int | None) -> str:
    """The window's words for a port in use: what to click, never only a command-line flag
    (`serve`'s sentence says --port; a desktop user started no command)."""
    first = f"Port {port} on {host} is in use by another program."
    if other is None:
        return (
            f"{first} Stop the other program and start LMSP Desktop again; once it runs, "
            "Settings › Port chooses another port for later starts."
        )
    return (
        f"{first} Start on port {other} instead (for this run, or from now on with the box "
        "below: saved as Settings › Port), or stop the other program and start LMSP Desktop "
        "again."
    )


def keep_port_text(other: int) -> str:
    return f"Use port {other} from now on"


async def main(args: argparse.Namespace, qsettings: QSettings | None = None) -> int:
    """Store → port bound → recovery → service → window → recovery report (Core.open binds
    the port before anything in the store changes: a port in use fails the launch with the
    store as it was); returns the exit status once the window asks to quit (Quit, Ctrl+Q,
    SIGTERM) and the core has stopped."""
    from lmsp_desktop.app import Core
    from lmsp_desktop.gui.main_window import MainWindow, wait_closed

    port = args.port
    port_in_use: int | None = None  # the box chose `port` instead of this one
    keep_port = False  # and the user ticked "Use port N from now on"
    while True:
        core = Core(
            args.data_dir,
            model_dirs=args.models_dir,
            host=args.host,
            port=port,
            no_sources=args.no_source,
            allowed_origins=args.allow_origin,
            max_context=args.max_context,
            port_in_use=port_in_use,
        )
        try:
            if getattr(args, "start_error", None) is not None:  # its log file (cli._run_command)
                raise args.start_error
            report = await core.open()
            if keep_port and port is not None:
                # Saved as Settings' port once the store is open and the port is bound: the
                # next start uses it without the box (it came back at every start).
                await core.save_settings(dataclasses.replace(core.stored_settings, port=port))
            await core.start_service()  # the model scan runs in the background, as for `serve`
            break
        except Exception as exc:  # port in use, a locked or damaged database, a bug
            # Say why in a dialog (never a window that just vanishes), after a quiet cleanup.
            try:
                await core.stop()
            except Exception:
                log.exception("cleanup after a failed start failed")
            if is_lock_refusal(exc) and await hand_over_soon(args.data_dir):
                return 0  # a window of this data directory is starting: it came to the front
            args.start_error = exc  # cli._main removes what a refused start made
            text = aio.error_text(exc)
            # The same sentence on stdout and in the log: a box alone leaves no trace for
            # whoever started it from a terminal or reads the log later. An ERROR, as `serve`
            # logs the same failure (a start that did not happen is not a warning).
            print(f"LMSP Desktop could not start: {text}", flush=True)
            log.error("could not start: %s", text)
            other = None
            if isinstance(exc, LmspError) and exc.code == "port_in_use":
                # Nothing runs yet, Settings included: the box offers a free port for this
                # run (one-off, as --port is) and says where a port is kept for later.
                host, taken = core.settings.host, core.settings.port
                other = free_port_near(host, taken)
                text = port_in_use_text(host, taken, other)
            retry = keep = None
            if other is not None:
                retry, keep = f"Start on port {other}", keep_port_text(other)
            box = failure_box(text, retry, keep)
            await ask(box)
            if retry is None or box.clickedButton() is box.button(QMessageBox.StandardButton.Ok):
                return 1
            args.start_error = None  # tried again on the port offered: not a refused start
            if port_in_use is None:  # the port the user meant, not a second one offered
                port_in_use = core.settings.port
            port = other
            keep_port = box.checkBox() is not None and box.checkBox().isChecked()
    window = MainWindow(core, qsettings)
    later_launches = WindowServer(args.data_dir, window.bring_to_front, window)
    loop = asyncio.get_running_loop()
    previous = {}

    def stopped_by(number: int, _frame: object) -> None:
        core.stopped_by_signal = signal.Signals(number).name  # the next start names it
        loop.call_soon_threadsafe(window.quit)

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, stopped_by)
    try:
        window.show()
        await window.load()
        if report.items:
            window.show_recovery(report)
        await wait_closed(window)
    finally:
        # Every step runs even if an earlier one fails: the core must stop (models freed,
        # store closed, service.json removed, lock released) whatever the window's teardown does.
        steps = StopSteps("quitting the app")
        for sig, handler in previous.items():
            await steps.run(
                f"restoring the {sig.name} handler", partial(signal.signal, sig, handler)
            )
        await steps.run("closing the second-launch socket", later_launches.close)
        await steps.run("hiding the window", window.hide)
        await steps.run("stopping the window's updates", window.stop_updates)
        await steps.run("stopping the core", core.stop)
    return 1 if steps.failures else 0  # each failure is in the log with its traceback


NO_DISPLAY = (
    "lmsp-desktop: there is no display to open the window on (DISPLAY and WAYLAND_DISPLAY "
    "are unset). On a machine without a desktop, run the service alone: `lmsp-desktop "
    "serve` (or `make serve`); over SSH, forward the display with `ssh -X`."
)


def missing_display(platform: str, env: dict[str, str]) -> bool:
    """Linux with no X or Wayland display and no Qt platform chosen: Qt would abort with
    its own "could not connect to display" and a core dump (a new user's `make run` on a
    server)."""
    if not platform.startswith("linux") or env.get("QT_QPA_PLATFORM"):
        return False
    return not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def run_gui(args: argparse.Namespace) -> int:
    import os

    import qasync

    if missing_display(sys.platform, dict(os.environ)):
        print(NO_DISPLAY, file=sys.stderr)
        return 1

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv)
    app.setApplicationName("LMSP Desktop")
    app.setOrganizationName("LMSP")
    # Wayland and the desktop match the window to lmsp-desktop.desktop (its icon and name).
    QGuiApplication.setDesktopFileName("lmsp-desktop")
    app.setWindowIcon(app_icon())
    app.setQuitOnLastWindowClosed(False)  # closing hides to the tray; Quit ends the app
    # Python handles signals only between bytecodes: wake it up regularly.
    ticker = QTimer(interval=250)
    ticker.timeout.connect(lambda: None)
    ticker.start()
    if hand_over(args.data_dir):
        given = args.port is not None or args.host is not None or bool(args.models_dir)
        print(
            "LMSP Desktop is already running: its window is in front now."
            + (" --host, --port and --models-dir apply when it starts, not now." if given else ""),
            flush=True,
        )
        return 0
    return int(qasync.run(main(args)))
