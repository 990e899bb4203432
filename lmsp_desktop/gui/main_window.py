"""The main window: navigation with live counters, the three pages, menus, status bar, tray."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

from PySide6 import __version__ as pyside_version
from PySide6.QtCore import QRect, QSettings, QSize, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDesktopServices,
    QHideEvent,
    QIcon,
    QKeySequence,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QHBoxLayout,
    QMainWindow,
    QMenu,
    QMessageBox,
    QStackedWidget,
    QSystemTrayIcon,
    QWidget,
)

from lmsp_desktop import __version__
from lmsp_desktop.core.config import Settings, database_path
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.info import VERIFIED
from lmsp_desktop.core.states import CANCELLABLE, TERMINAL, UNFINISHED, TaskState
from lmsp_desktop.core.views import RecoveryReport, TaskFilter
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.addresses import local_url, reachable_url
from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.dialogs.connect_dialog import ConnectDialog
from lmsp_desktop.gui.dialogs.pair_dialog import PairDialog
from lmsp_desktop.gui.dialogs.prompt_dialog import PromptDialog, default_model
from lmsp_desktop.gui.dialogs.quit_dialog import QuitDialog
from lmsp_desktop.gui.dialogs.recovery_dialog import RecoveryDialog
from lmsp_desktop.gui.dialogs.settings_dialog import SettingsDialog
from lmsp_desktop.gui.format import STATE_COLOURS, app_icon, dot_icon, why_ended
from lmsp_desktop.gui.pages.clients_page import ClientsPage
from lmsp_desktop.gui.pages.models_page import ModelsPage
from lmsp_desktop.gui.pages.sidebar import Sidebar
from lmsp_desktop.gui.pages.tasks_page import TasksPage
from lmsp_desktop.gui.status import StatusBar

ACTIVE = tuple(s.value for s in TaskState if s in UNFINISHED)
CANCEL_WAIT_S = 10.0  # how long "Cancel them and quit" waits for the runner to confirm
BUSY = tuple(s.value for s in TaskState if s in UNFINISHED and s != TaskState.QUEUED)


FIRST_SIZE = QSize(1200, 780)
FRAME_ALLOWANCE = QSize(10, 50)  # the window manager's title bar and borders are outside resize()


def screen_room(widget: QWidget) -> QRect:
    """Where the window may go: its screen without panels and docks."""
    return widget.screen().availableGeometry()


def first_size(room: QRect) -> QSize:
    """The first launch's size: roomy on a big screen, never bigger than a small one (a 1200x780
    window opened on a 900x600 screen hid its right edge and its status bar)."""
    return QSize(
        min(FIRST_SIZE.width(), room.width() - FRAME_ALLOWANCE.width()),
        min(FIRST_SIZE.height(), room.height() - FRAME_ALLOWANCE.height()),
    )


class MainWindow(QMainWindow):
    """A thin view over a running core, seen only through `CoreApi`."""

    quit_requested = Signal()

    def __init__(self, core: CoreApi, qsettings: QSettings | None = None) -> None:
        super().__init__()
        self.core = core
        self.qsettings = qsettings or QSettings("LMSP", "LMSP Desktop")
        self.dialog: Any = None  # the open dialog, kept referenced (and reachable by tests)
        self.last_prompt_model: str | None = None  # Try a prompt's last model in this run
        self.quitting = False
        self.bridge = CoreBridge(core, parent=self)
        self.tasks = TasksPage(core, core.url, qsettings=self.qsettings)
        self.models = ModelsPage(core, qsettings=self.qsettings)
        self.clients = ClientsPage(core)
        self.sidebar = Sidebar()
        self.nav = self.sidebar.nav
        self.pages = QStackedWidget()
        for page in (self.tasks, self.models, self.clients):
            self.pages.addWidget(page)
        self.nav.currentRowChanged.connect(self.pages.setCurrentIndex)
        self.nav.setCurrentRow(0)
        body = QWidget()
        layout = QHBoxLayout(body)
        layout.addWidget(self.sidebar)
        layout.addWidget(self.pages, 1)
        self.setCentralWidget(body)
        self.status = StatusBar()
        self.setStatusBar(self.status)
        self.setWindowIcon(app_icon())
        self._counts: dict[str, int] = {}
        self._question_reading = False  # the open quit question is re-reading its tasks
        aio.closing(False)
        self._menus()
        self._wire()
        self.tray = self._tray() if QSystemTrayIcon.isSystemTrayAvailable() else None
        self._rate_seen = (self.bridge.delta_events, time.monotonic())
        self._rate_timer = QTimer(self, interval=1000)
        self._rate_timer.timeout.connect(self.sample_rate)
        self._rate_timer.start()
        self._pending = 0
        self._waiting: QuitDialog | None = None  # the quit dialog while waiting for tasks
        self._paused_before_wait = False
        self._counts_timer = QTimer(self, singleShot=True, interval=500)
        self._counts_timer.timeout.connect(lambda: aio.spawn(self.refresh_counts(), self))
        self.set_url(core.url)
        self.resize(first_size(screen_room(self)))
        self._restore()

    # -- construction ------------------------------------------------------------------------
    def _menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        settings = QAction("Settings…", self, shortcut=QKeySequence("Ctrl+,"))
        settings.triggered.connect(self.open_settings)
        quit_action = QAction("Quit", self, shortcut=QKeySequence("Ctrl+Q"))
        quit_action.triggered.connect(self.request_quit)
        self.quit_action = quit_action
        connect = QAction("Connect a client…", self)
        connect.triggered.connect(self.open_connect)
        self.connect_action = connect
        file_menu.addAction(connect)
        file_menu.addAction(settings)
        file_menu.addSeparator()
        file_menu.addAction(quit_action)
        view = self.menuBar().addMenu("&View")
        for i, name in enumerate(("Tasks", "Models", "Clients")):
            action = QAction(name, self, shortcut=QKeySequence(f"Ctrl+{i + 1}"))
            action.triggered.connect(lambda _=False, row=i: self.nav.setCurrentRow(row))
            view.addAction(action)
        help_menu = self.menuBar().addMenu("&Help")
        report = QAction("Last recovery report", self)
        report.triggered.connect(lambda: aio.spawn(self.open_last_report(), self))
        logs = QAction("Open log folder", self)
        logs.triggered.connect(self.open_log_folder)
        about = QAction("About LMSP Desktop", self)
        about.triggered.connect(self.open_about)
        for action in (report, logs, about):
            help_menu.addAction(action)

    def _wire(self) -> None:
        self.bridge.tasks_changed.connect(self.tasks.on_changes)
        # The counts move with the rows: the table reads them with a transition's rows.
        self.tasks.model.counts_read.connect(self._show_counts)
        self.bridge.tasks_changed.connect(self.sidebar.on_changes)
        self.bridge.tasks_reset.connect(lambda: aio.spawn(self.tasks.reload(), self))
        self.bridge.tasks_reset.connect(self._counts_soon)
        self.bridge.counts_moved.connect(self._counts_soon)
        self.models.connect_bridge(self.bridge)
        # After the list is re-read (a scan may end long after the window opened).
        self.models.model.modelReset.connect(self._update_nav)
        self.bridge.pairing_changed.connect(self.clients.on_pairing_changed)
        self.clients.pending_changed.connect(self._set_pending)
        self.clients.model.modelReset.connect(self._update_nav)
        self.clients.model.rowsInserted.connect(self._update_nav)  # a client made or revoked
        self.clients.model.rowsRemoved.connect(self._update_nav)  # elsewhere, read while shown
        self.tasks.try_prompt_requested.connect(lambda: aio.spawn(self.open_prompt(), self))
        self.tasks.pair_requested.connect(self.open_pair)
        self.tasks.connect_requested.connect(self.open_connect)
        self.clients.pair_requested.connect(self.open_pair)
        self.clients.connect_requested.connect(self.open_connect)
        self.sidebar.pause_toggled.connect(self.set_paused)
        self.sidebar.task_clicked.connect(self._show_in_tasks)
        self.sidebar.describe = self._why_ended
        for signal in (self.models.model.modelReset, self.models.model.dataChanged):
            signal.connect(self._update_loaded)  # loaded, unloaded, the idle countdown

    def _tray(self) -> QSystemTrayIcon:
        tray = QSystemTrayIcon(app_icon("tray"), self)
        menu = QMenu(self)
        self.tray_counts = menu.addAction("No tasks running")
        self.tray_counts.setEnabled(False)
        menu.addSeparator()
        menu.addAction("Show window", self.showNormal)
        self.pause_action = menu.addAction("Pause new work")
        self.pause_action.setCheckable(True)
        self.pause_action.toggled.connect(self.set_paused)
        menu.addSeparator()
        menu.addAction("Quit", self.request_quit)
        tray.setContextMenu(menu)
        tray.activated.connect(self.tray_activated)
        tray.show()
        return tray

    def tray_activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        """A left click or double click shows the window; a right click only opens the menu
        (where Pause new work and Quit are)."""
        if reason in (
            QSystemTrayIcon.ActivationReason.Trigger,
            QSystemTrayIcon.ActivationReason.DoubleClick,
        ):
            self.bring_to_front()

    def bring_to_front(self) -> None:
        """Show the window in front (a tray click, a second launch): back from the tray or
        from minimised, keeping maximised if it was."""
        self.setWindowState(self.windowState() & ~Qt.WindowState.WindowMinimized)
        self.show()
        self.raise_()
        self.activateWindow()

    def set_paused(self, paused: bool) -> None:
        """Drain: the service answers 503 to new work while accepted tasks finish."""
        self.core.pause(paused)
        self.status.set_paused(paused)
        self.sidebar.set_paused(paused)
        if self.tray is not None and self.pause_action.isChecked() != paused:
            self.pause_action.setChecked(paused)
        if self.tray is not None:
            self.tray.setIcon(app_icon("tray-paused" if paused else "tray"))

    async def load(self) -> None:
        await self.tasks.load()
        await self.models.load()
        await self.clients.load()
        await self.refresh_counts()
        ended = TaskFilter(states=tuple(s.value for s in TaskState if s in TERMINAL))
        self.sidebar.seed_recent(await self.core.task_page(ended, 0, 20, "id", True))

    def set_url(self, url: str) -> None:
        # Never 0.0.0.0 (nobody can connect to it): this machine's URL here, other devices'
        # in the network chip and the Connect and Pair dialogs.
        host = self.core.settings.host
        remote = reachable_url(url, host)
        url = local_url(url)
        self.tasks.set_url(url)
        self.status.set_service(url, host, remote)
        self.sidebar.set_service(url, paused=self.core.paused)
        self.status.set_database(database_path(Path(self.core.data_dir)))
        self.setWindowTitle(f"LMSP Desktop — {url}" if url else "LMSP Desktop")

    # -- live counters -----------------------------------------------------------------------
    async def refresh_counts(self) -> None:
        """Read the counts now (the tasks table tells them: `_show_counts`)."""
        await self.tasks.model.read_counts()

    def _why_ended(self, task_id: str) -> str:
        row = self.tasks.model.task(task_id)
        return "" if row is None else why_ended(row)

    def _show_counts(self, counts: dict[str, int]) -> None:
        before, self._counts = self._counts, counts
        self.sidebar.explain_recent()  # told with the rows of a transition just read
        self.status.set_counts(self._counts)
        self.sidebar.set_counts(self._counts)
        left = sum(self._counts.get(s, 0) for s in ACTIVE)
        if self._waiting is not None:
            self._waiting.set_left(left)
        asking = isinstance(self.dialog, QuitDialog) and self.dialog.isVisible()
        if left == 0 and (self._waiting is not None or asking):
            # Waited for, or finished while the question was open (walked under Xvfb, it
            # still said "1 task unfinished" beside the completed row): nothing is left to
            # decide, so the quit goes ahead as it does when nothing is unfinished.
            (self._waiting or self.dialog).accept()
            self.quit()
        elif asking and not self._waiting and self._counts != before and not self._question_reading:
            # Only when the counts moved, one read at a time: the read lists every
            # unfinished task.
            self._question_reading = True
            aio.spawn(self._refresh_question(), self)
        self.status.set_database(database_path(Path(self.core.data_dir)))
        self._update_nav()

    def _counts_soon(self, *_: Any) -> None:
        if not self._counts_timer.isActive():  # at most every 500 ms, even while busy
            self._counts_timer.start()

    def _set_pending(self, count: int) -> None:
        self._pending = count
        self._update_nav()

    def _update_nav(self) -> None:
        active = sum(self._counts.get(s, 0) for s in ACTIVE)
        self.nav.item(0).setText(f"Tasks   {active}" if active else "Tasks")
        self.nav.item(0).setIcon(dot_icon(STATE_COLOURS["running"]) if active else _blank())
        models = self.models.model.rowCount()
        self.nav.item(1).setText(f"Models   {models}" if models else "Models")
        clients = self.clients.model.rowCount()
        # While requests wait, they are the news (the paired count would not fit beside them
        # in the narrow sidebar); the tooltip has both.
        self.nav.item(2).setText(
            f"Clients ({self._pending} waiting)"
            if self._pending
            else "Clients" + (f"   {clients}" if clients else "")
        )
        self.nav.item(2).setToolTip(
            f"{clients} paired, {self._pending} pairing request(s) waiting"
            if self._pending
            else f"{clients} paired"
        )
        self.nav.item(2).setIcon(
            dot_icon(STATE_COLOURS["cancelling"]) if self._pending else _blank()
        )
        if self.tray is not None:
            running = self._counts.get("running", 0)
            text = f"{running} running, {self._counts.get('queued', 0)} queued"
            self.tray.setToolTip(f"LMSP Desktop: {text}")
            self.tray_counts.setText(text)
            busy = any(self._counts.get(s, 0) for s in BUSY)
            paused = self.pause_action.isChecked()
            self.tray.setIcon(
                app_icon("tray-paused" if paused else "tray-busy" if busy else "tray")
            )

    def _update_loaded(self, *_: Any) -> None:
        self.sidebar.set_loaded(self.models.model.in_memory())

    def sample_rate(self) -> None:
        """Once a second: text deltas committed since the last sample → the sparkline."""
        count, now = self.bridge.delta_events, time.monotonic()
        before, then = self._rate_seen
        self._rate_seen = (count, now)
        self.status.rate.add(count - before, now - then)
        self._update_loaded()  # a model's memory grows as its KV cache fills
        # The database grows with streamed text too, which moves no count (the counts
        # refresh only when a state moves).
        self.status.set_database(database_path(Path(self.core.data_dir)))

    # -- dialogs (all opened with open(), never exec()) --------------------------------------
    def _open(self, dialog: Any) -> Any:
        self.dialog = dialog
        dialog.open()
        return dialog

    def open_settings(self) -> None:
        dialog = SettingsDialog(self.core, self)
        dialog.saved.connect(self._settings_saved)
        self._open(dialog)

    def _settings_saved(self, settings: Settings) -> None:
        self.status.showMessage("Settings saved", 3000)

    async def open_prompt(self) -> None:
        models = [m.id for m in await self.core.models() if m.state == VERIFIED]
        chosen = default_model(models, self.core.model_loaded_state, self.last_prompt_model)
        dialog = PromptDialog(models, self.core.submit, self, chosen=chosen)
        dialog.submitted.connect(self._prompt_sent)
        self._open(dialog)

    def _prompt_sent(self, task_id: str) -> None:
        if isinstance(self.dialog, PromptDialog):
            self.last_prompt_model = self.dialog.model.currentText()
        self.nav.setCurrentRow(0)
        self.tasks.show_task(task_id)

    def open_connect(self) -> None:
        dialog = ConnectDialog(self.core, self.core.url, self)
        dialog.created.connect(lambda _: aio.spawn(self.clients.load(), self))
        self.bridge.loaded_changed.connect(dialog.on_loaded_changed)  # snippets follow loads
        self._open(dialog)

    def open_pair(self) -> None:
        dialog = PairDialog(self.core, self.core.url, self, host=self.core.settings.host)
        self.bridge.pairing_changed.connect(dialog.on_pairing_changed)
        self._open(dialog)
        aio.spawn(dialog.new_code(), dialog)

    def show_recovery(self, report: RecoveryReport) -> RecoveryDialog:
        dialog = RecoveryDialog(report, self)
        dialog.show_task.connect(self._show_in_tasks)
        return self._open(dialog)  # type: ignore[no-any-return]

    async def open_last_report(self) -> None:
        report = await self.core.last_recovery_report()
        if report is None:  # a menu choice answers where the eyes are, not in the status bar
            self._open(
                QMessageBox(
                    QMessageBox.Icon.Information,
                    "Last recovery report",
                    "There is no recovery report: no task needed recovering since this data "
                    f"folder was created.\n\nData folder: {self.core.data_dir}",
                    parent=self,
                )
            )
            return
        self.show_recovery(report)

    def about_text(self) -> str:
        return (
            f"<h3>LMSP Desktop {__version__}</h3>"
            f"<p>Service: {local_url(self.core.url) or 'not started'}<br>"
            f"Data folder: {self.core.data_dir}<br>"
            f"SQLite {sqlite3.sqlite_version} · PySide6 {pyside_version}</p>"
        )

    def open_about(self) -> QMessageBox:
        box = QMessageBox(
            QMessageBox.Icon.NoIcon, "About LMSP Desktop", self.about_text(), parent=self
        )
        box.setIconPixmap(app_icon().pixmap(64, 64))
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return self._open(box)  # type: ignore[no-any-return]

    def log_folder(self) -> Path:
        return Path(self.core.data_dir) / "logs"

    def open_log_folder(self) -> bool:
        """Open the log folder in the file manager; without one, say where it is."""
        folder = self.log_folder()
        folder.mkdir(parents=True, exist_ok=True)
        if QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
            return True
        box = QMessageBox(
            QMessageBox.Icon.Information,
            "Log folder",
            f"No file manager could open it. The logs are in:\n{folder}",
            parent=self,
        )
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._open(box)
        return False

    def _show_in_tasks(self, task_id: str) -> None:
        self.nav.setCurrentRow(0)
        self.tasks.show_task(task_id)

    # -- hidden in the tray: nobody looks, so nothing re-queries ------------------------------
    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._set_active(True)

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self._set_active(False)

    def _set_active(self, active: bool) -> None:
        """Hidden: the bridge stops flushing and the pages' clocks stop; shown: catch up."""
        for page in (self.tasks, self.models, self.clients, self.sidebar):
            page.set_active(active)
        if active:
            self._rate_timer.start()
        else:
            self._rate_timer.stop()
        self.bridge.set_active(active)

    # -- closing -----------------------------------------------------------------------------
    def stop_updates(self) -> None:
        """Before the core stops: no timer may query it afterwards (a counts refresh queued
        just before the stop failed on the closed store and showed an error box)."""
        self._counts_timer.stop()
        self._rate_timer.stop()
        self.bridge.close()
        aio.closing()

    def request_quit(self) -> None:
        """Quit (Ctrl+Q, the tray's Quit, closing without a tray): ask first when tasks are
        unfinished, since quitting leaves them to their restart policy."""
        if isinstance(self.dialog, QuitDialog) and self.dialog.isVisible():
            self.dialog.raise_()
            return
        aio.spawn(self._ask_quit(), self)

    async def _ask_quit(self) -> None:
        rows = await self.core.task_page(TaskFilter(states=ACTIVE), 0, 100_000, "id", False)
        if not rows:
            self.quit()
            return
        if self.isHidden():
            self.showNormal()  # the question needs a window (asked from the tray)
        dialog = QuitDialog(rows, self)
        dialog.chosen.connect(self._quit_chosen)
        self._open(dialog)

    async def _refresh_question(self) -> None:
        """The open quit question's counts and consequences, as the tasks are now."""
        counts = self._counts
        try:
            rows = await self.core.task_page(TaskFilter(states=ACTIVE), 0, 100_000, "id", False)
        finally:
            self._question_reading = False
        if rows and isinstance(self.dialog, QuitDialog) and self.dialog.isVisible():
            self.dialog.show_rows(rows)
            if self._counts != counts:  # they moved during the read: once more
                self._question_reading = True
                aio.spawn(self._refresh_question(), self)

    def _quit_chosen(self, choice: str) -> None:
        if choice == "now":
            self.quit()
        elif choice == "cancel":
            aio.spawn(self._cancel_all_then_quit(), self)
        elif choice == "wait":
            self._waiting = self.dialog
            self._paused_before_wait = self.core.paused
            self.set_paused(True)
            aio.spawn(self.refresh_counts(), self)
        elif self._waiting is not None:  # keep running after all: take new work again
            self._waiting = None
            self.set_paused(self._paused_before_wait)

    async def _cancel_all_then_quit(self) -> None:
        """Refuse new work, cancel every unfinished task, wait (briefly) for the runner to
        confirm, then quit."""
        self.set_paused(True)
        filter_active = TaskFilter(states=ACTIVE)
        for row in await self.core.task_page(filter_active, 0, 100_000, "id", False):
            if row.state in CANCELLABLE:
                with contextlib.suppress(LmspError):  # it finished meanwhile
                    await self.core.cancel(row.id)
        self.status.showMessage("Cancelling unfinished tasks…")
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            if not await self.core.task_page(filter_active, 0, 1, "id", False):
                break
            await asyncio.sleep(0.1)
        self.quit()

    def quit(self) -> None:
        """Quit now, without asking (also on SIGTERM)."""
        self.quitting = True
        self._save()
        self.quit_requested.emit()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.quitting:
            self._save()
            self.stop_updates()
            event.accept()
            return
        event.ignore()
        if self.tray is not None:
            self.hide()  # keeps serving; Quit from the tray or Ctrl+Q ends it
            self._tell_once_about_tray()
        else:
            self.request_quit()

    def _tell_once_about_tray(self) -> None:
        if self.tray is None or self.qsettings.value("tray/told", False, type=bool):
            return
        self.tray.showMessage(
            "LMSP Desktop keeps serving",
            "The window is closed but the service keeps running here in the tray. "
            "Choose Quit in this icon's menu to stop it.",
            QSystemTrayIcon.MessageIcon.Information,
            8000,
        )
        self.qsettings.setValue("tray/told", True)

    def _save(self) -> None:
        # Not the tasks table's header: its columns fit their content and the window
        # (ColumnFitter), and restoring an older version's header state crashed Qt at show.
        self.qsettings.setValue("geometry", self.saveGeometry())
        self.qsettings.setValue("tasks/splitter", self.tasks.splitter.saveState())
        self.qsettings.sync()

    def _restore(self) -> None:
        for key, restore in (
            ("geometry", self.restoreGeometry),
            ("tasks/splitter", self.tasks.splitter.restoreState),
        ):
            value = self.qsettings.value(key)
            if value is not None:
                restore(value)


def _blank() -> QIcon:
    return QIcon()


async def wait_closed(window: MainWindow) -> None:
    """Resolve once the window asks to quit (Quit, Ctrl+Q, or close without a tray)."""
    if window.quitting:  # asked before anyone waited (SIGTERM while loading)
        return
    done = asyncio.Event()
    window.quit_requested.connect(done.set)
    await done.wait()
