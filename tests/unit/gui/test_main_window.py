"""The main window over the fake core: a real store and pairing, scripted models and runner."""

from __future__ import annotations

import asyncio
import time

import pytest
import shiboken6
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QSystemTrayIcon

from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.storage.recovery import last_report, next_boot, recover
from lmsp_desktop.gui.dialogs.recovery_dialog import RecoveryTableModel
from lmsp_desktop.gui.main_window import MainWindow
from tests.support.gui_core import fake_model
from tests.support.polling import until
from tests.unit.gui.helpers import make_task, run_task

pytestmark = pytest.mark.gui


@pytest.fixture
async def window(qtbot, core, tmp_path):
    qsettings = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    win = MainWindow(core, qsettings)
    qtbot.addWidget(win)
    await win.load()
    win.show()
    yield win
    win.quitting = True  # the teardown closes the window: no question asked then
    if shiboken6.isValid(win) and shiboken6.isValid(win.bridge):
        # As the app does before its core stops: a view update still reading (a task
        # table's counts after a burst of changes) then ends quietly on the closed store.
        win.stop_updates()


async def test_navigation_counters_status_bar_and_empty_state(window, store):
    assert window.tasks.stack.currentWidget() is window.tasks.empty
    assert "127.0.0.1:5677/v1" in window.tasks.empty_label.text()
    assert "loopback only" in window.status.url_label.text()
    assert not window.status.warning.isVisible()
    assert window.status.db_label.text().startswith("lmsp.db ")
    assert window.nav.item(1).text() == "Models   1"
    task_id = await make_task(store)
    await run_task(store, task_id, ["hi"], finish=False)
    await make_task(store)
    await until(lambda: window.nav.item(0).text() == "Tasks   2", what="active counter")
    assert window.status.counts_label.text() == "1 running · 1 queued"
    window.status.copy_url()
    assert QGuiApplication.clipboard().text() == "http://127.0.0.1:5677/v1"
    assert window.status.currentMessage() == "URL copied ✓"
    assert window.status.url_label.isVisible()  # the message never hides the URL
    assert QSystemTrayIcon.isSystemTrayAvailable() is False and window.tray is None


async def test_pairing_request_puts_a_dot_on_clients(window):
    await window.core.pairing.start("laptop", frozenset({"models:read"}), "10.0.0.2")
    await until(lambda: "(1 waiting)" in window.nav.item(2).text(), what="clients dot")
    window.nav.setCurrentRow(2)
    assert window.pages.currentWidget() is window.clients


async def test_try_a_prompt_creates_a_task_through_submit(window):
    await window.open_prompt()
    dialog = window.dialog
    assert dialog.model.currentText() == "smollm2"
    dialog.prompt.setPlainText("   ")
    assert await dialog.send_prompt() is None
    assert dialog.error.text() == "Write a prompt first."
    dialog.prompt.setPlainText("Tell me a joke")
    task_id = await dialog.send_prompt()
    assert window.core.submitted == [task_id]
    await until(lambda: window.tasks.model.row_of(task_id) is not None)


async def test_try_a_prompt_takes_typing_at_once_and_sends_on_ctrl_enter(window, qtbot):
    await window.open_prompt()
    dialog = window.dialog
    await until(lambda: dialog.isActiveWindow(), what="the dialog active")
    assert dialog.focusWidget() is dialog.prompt  # not the Model box
    qtbot.keyClicks(dialog.focusWidget(), "Tell me a joke")  # replaces the example
    assert dialog.prompt.toPlainText() == "Tell me a joke"
    qtbot.keyClick(dialog.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    await until(lambda: len(window.core.submitted) == 1, what="the prompt sent")
    await until(lambda: not dialog.isVisible(), what="the dialog closed")


async def test_settings_dialog_saves_through_the_store(window, store):
    window.open_settings()
    dialog = window.dialog
    dialog.port.setValue(6001)
    assert not dialog.network.isChecked() and not dialog.warning.isVisible()
    dialog.network.setChecked(True)  # "Let other devices on my network use it"
    assert dialog.host.text() == "0.0.0.0"
    assert dialog.warning.isVisible()
    dialog.retention.setValue(3)
    dialog.on_restart.setCurrentText("resume")
    await dialog.save()
    saved = await store.settings()
    assert (saved.port, saved.host, saved.retention_days, saved.default_on_restart) == (
        6001,
        "0.0.0.0",
        3.0,
        "resume",
    )
    assert window.status.currentMessage() == "Settings saved"


async def test_recovery_dialog_lists_each_task_and_shows_it(qtmodeltester, window, store):
    ids = {}
    for state, policy in (
        ("queued", RestartPolicy.FAIL),
        ("running", RestartPolicy.RETRY),
        ("running", RestartPolicy.RESUME),
        ("cancelling", RestartPolicy.FAIL),
    ):
        task_id = await make_task(store, on_restart=policy)
        if state != "queued":
            await run_task(store, task_id, ["x"], finish=False)
        if state == "cancelling":
            await store.tasks.cancel(task_id)
        ids[(state, policy)] = task_id
    report = await recover(store.tasks, await next_boot(store.tasks))
    dialog = window.show_recovery(report)
    qtmodeltester.check(RecoveryTableModel(report.items), force_py=True)  # unparented
    assert (
        "Recovered 4 tasks after an unclean shutdown"
        in dialog.findChildren(type(dialog.summary))[0].text()
    )
    assert dialog.summary.text() == (
        "1 failed: the service restarted · 1 will start again from the beginning · "
        "1 resumed · 1 cancelled, as was asked"
    )
    rows = {
        dialog.model.index(r, 0).data(257): [dialog.model.index(r, c).data() for c in range(5)]
        for r in range(dialog.model.rowCount())
    }
    assert rows[ids[("queued", RestartPolicy.FAIL)]][2] == "queued → failed"
    assert rows[ids[("running", RestartPolicy.RETRY)]][2] == "running → queued"
    # run_task wrote no snapshot: the resume starts from nothing, and the dialog says so.
    assert rows[ids[("running", RestartPolicy.RESUME)]][4] == (
        "Resumed from the start (it had not generated anything yet)"
    )
    assert rows[ids[("cancelling", RestartPolicy.FAIL)]][2] == "cancelling → cancelled"
    dialog.show_button.click()
    assert window.pages.currentWidget() is window.tasks
    await window.open_last_report()
    assert window.dialog is not dialog and window.dialog.model.rowCount() == 4
    assert (await last_report(store.tasks))["items"]


async def test_quit_asks_the_app_to_stop_and_remembers_the_layout(window, tmp_path):
    quits: list[bool] = []
    window.quit_requested.connect(lambda: quits.append(True))
    window.tasks.splitter.setSizes([100, 300])
    window.quit()
    assert quits == [True]
    assert window.qsettings.value("tasks/splitter") is not None


async def test_tokens_per_second_sparkline_follows_committed_deltas(window, store):
    rate = window.status.rate
    window._rate_timer.stop()  # samples taken by the test alone, whatever the machine's load
    window.sample_rate()
    assert rate.label.text() == "0 tok/s"
    task_id = await make_task(store)
    await run_task(store, task_id, [], finish=False)
    await store.tasks.append_deltas(
        task_id, ["a", "b", "c"], output_tokens=3, input_tokens=5, snapshot=None
    )
    await store.tasks.append_deltas(
        task_id, ["d", "e"], output_tokens=5, input_tokens=5, snapshot=None
    )
    await until(lambda: window.bridge.delta_events == 5)  # the commits' news has arrived
    window._rate_seen = (window._rate_seen[0], time.monotonic() - 1.0)  # sampled a second ago
    window.sample_rate()
    assert rate.label.text() in ("5 tok/s", "4 tok/s")  # five deltas in about a second
    points = rate.sparkline.points()
    assert points[-1].y() < points[0].y()  # the line rises at its right end
    assert rate.isVisible()
    window.sample_rate()
    assert rate.label.text() == "0 tok/s"


async def test_window_icon_and_help_menu(window, data_dir):
    from PySide6.QtCore import QObject, QUrl, Slot
    from PySide6.QtGui import QDesktopServices

    sizes = {s.width() for s in window.windowIcon().availableSizes()}
    assert {16, 32, 48, 256} <= sizes
    help_menu = window.menuBar().actions()[-1].menu()
    assert [a.text() for a in help_menu.actions()] == [
        "Last recovery report",
        "Open log folder",
        "About LMSP Desktop",
    ]
    box = window.open_about()
    assert box.isVisible()
    import sqlite3

    from lmsp_desktop import __version__

    for fact in (__version__, str(data_dir), "http://127.0.0.1:5677", sqlite3.sqlite_version):
        assert fact in box.text()
    box.close()

    class Opened(QObject):
        def __init__(self) -> None:
            super().__init__()
            self.urls: list[QUrl] = []

        @Slot(QUrl)
        def open(self, url: QUrl) -> None:
            self.urls.append(url)

    opened = Opened()
    QDesktopServices.setUrlHandler("file", opened, "open")
    try:
        assert window.open_log_folder()
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert [u.toLocalFile() for u in opened.urls] == [str(data_dir / "logs")]
    assert (data_dir / "logs").is_dir()


async def test_models_counter_follows_a_scan_that_ends_after_the_window_opened(window):
    window.core.models_list.append(fake_model("gemma3"))
    window.core.announce_models()  # the registry's "the list changed"
    await until(lambda: window.nav.item(1).text() == "Models   2", what=window.nav.item(1).text)


async def test_hidden_window_stops_refreshing_and_catches_up_when_shown(window, store):
    first = await make_task(store)
    await until(lambda: window.tasks.model.rowCount() == 1, what="first row")
    window.hide()  # to the tray
    assert not window.bridge.active and not window.tasks._clock.isActive()
    second = await make_task(store)
    await run_task(store, first, ["hi"], finish=False)
    await asyncio.sleep(0.4)  # several flush intervals of a shown window
    assert window.tasks.model.row_of(second) is None  # nothing re-queried meanwhile
    assert window.tasks.model.task(first).state == "queued"
    window.show()
    await until(lambda: window.tasks.model.row_of(second) is not None, what="caught up")
    await until(lambda: window.tasks.model.task(first).state == "running", what="patched")
    assert window.bridge.active and window.tasks._clock.isActive()


async def test_many_changes_while_hidden_reload_the_table_instead(window, store, monkeypatch):
    from lmsp_desktop.gui import bridge as bridge_module

    monkeypatch.setattr(bridge_module, "MAX_HIDDEN_CHANGES", 3)
    window.hide()
    ids = [await make_task(store) for _ in range(6)]
    assert window.bridge._reset and not window.bridge._tasks
    window.show()
    await until(lambda: window.tasks.model.rowCount() == 6, what="reloaded rows")
    assert {window.tasks.model.task_id(r) for r in range(6)} == set(ids)
