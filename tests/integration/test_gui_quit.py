"""Quitting is a decision, not an accident (issue 16, defect 2): with tasks unfinished, Quit
asks (wait / quit now / cancel them), and the next start's report says what really happened.
A real core (store, runner, HTTP service) with a scripted engine that keeps tasks running."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PySide6.QtCore import QSettings, Qt

from lmsp_desktop import app as app_module
from lmsp_desktop.app import Core
from lmsp_desktop.gui import launch
from lmsp_desktop.gui.dialogs.quit_dialog import QuitDialog
from lmsp_desktop.gui.dialogs.recovery_dialog import RecoveryDialog
from tests.integration.gui_windows import (
    MODEL,
    client_token,
    launch_args,
    open_app,
    post_background,
    slow_engine,
)
from tests.integration.test_gui_recovery import the_window
from tests.support.polling import until

pytestmark = pytest.mark.gui


def quit_log(window: Any) -> list[bool]:
    quits: list[bool] = []
    window.quit_requested.connect(lambda: quits.append(True))
    return quits


async def two_unfinished(core: Any, window: Any) -> tuple[str, str]:
    token = await client_token(core)
    running = await post_background(core, token, on_restart="retry")
    queued = await post_background(core, token, on_restart="fail")
    rows = window.tasks.model
    await until(lambda: rows.row_of(queued) is not None, what="both rows")
    await until(lambda: rows.task(running).state == "running", what="the first one running")
    return running, queued


async def test_quit_now_asks_first_and_the_next_start_says_you_quit(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        await two_unfinished(core, window)
        quits = quit_log(window)
        window.quit_action.trigger()  # Ctrl+Q
        await until(lambda: isinstance(window.dialog, QuitDialog), what="the quit question")
        dialog = window.dialog
        assert quits == [] and window.isVisible()
        assert "2 tasks unfinished" in dialog.title.text()
        assert "1 will be marked failed and 1 will start over" in dialog.body.text()
        qtbot.mouseClick(dialog.now_button, Qt.MouseButton.LeftButton)
        assert quits == [True]

    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        report = window.dialog
        assert isinstance(report, RecoveryDialog)
        title = report.findChildren(type(report.summary))[0].text()
        assert "Recovered 2 tasks after you quit with 2 tasks unfinished" in title
        assert "unclean" not in title
        await window.open_last_report()  # Help ▸ Last recovery report says the same
        assert "after you quit with 2 tasks unfinished" in window.dialog.report.cause()


async def test_closing_without_a_tray_asks_and_keep_running_keeps_serving(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        await two_unfinished(core, window)
        quits = quit_log(window)
        assert window.tray is None
        window.close()
        await until(lambda: isinstance(window.dialog, QuitDialog), what="the quit question")
        assert window.isVisible() and quits == []
        qtbot.mouseClick(window.dialog.keep_button, Qt.MouseButton.LeftButton)
        assert quits == [] and not core.paused


async def test_cancel_them_and_quit_leaves_nothing_to_recover(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        running, queued = await two_unfinished(core, window)
        quits = quit_log(window)
        window.quit_action.trigger()
        await until(lambda: isinstance(window.dialog, QuitDialog), what="the quit question")
        qtbot.mouseClick(window.dialog.cancel_button, Qt.MouseButton.LeftButton)
        await until(lambda: quits == [True], what="quit after cancelling")
        for task_id in (running, queued):
            assert (await core.task(task_id))["state"] == "cancelled"

    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        assert window.dialog is None  # no recovery report: nothing was left unfinished


async def test_wait_for_them_refuses_new_work_and_quits_when_they_end(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine(tokens=60, delay=0.02)) as (
        core,
        window,
    ):
        running, queued = await two_unfinished(core, window)
        quits = quit_log(window)
        window.quit_action.trigger()
        await until(lambda: isinstance(window.dialog, QuitDialog), what="the quit question")
        dialog = window.dialog
        qtbot.mouseClick(dialog.wait_button, Qt.MouseButton.LeftButton)
        assert core.paused and dialog.isVisible() and quits == []
        token = await client_token(core, "late-client")
        async with (
            aiohttp.ClientSession(core.url) as http,
            http.post(
                "/v1/responses",
                json={"model": MODEL, "input": "hi", "background": True},
                headers={"Authorization": f"Bearer {token}"},
            ) as answer,
        ):
            assert answer.status == 503
        await until(lambda: "left" in dialog.progress.text(), what="a progress line")
        await until(lambda: quits == [True], what="quit once both ended")
        for task_id in (running, queued):
            assert (await core.task(task_id))["state"] == "completed"


async def test_tasks_ending_while_the_question_is_open_let_the_quit_go_ahead(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine(tokens=200, delay=0.02)) as (
        core,
        window,
    ):
        retried, _failed = await two_unfinished(core, window)
        quits = quit_log(window)
        window.quit_action.trigger()
        await until(lambda: isinstance(window.dialog, QuitDialog), what="the quit question")
        dialog = window.dialog
        assert dialog.title.text() == "<b>2 tasks unfinished</b> (2 running)."
        assert "1 will start over" in dialog.body.text()
        assert quits == []  # not answered: the tasks run to their end meanwhile
        # One ends (a client cancels it): the question says so (it kept its first counts
        # when walked under Xvfb).
        await core.cancel(retried)
        await until(
            lambda: dialog.title.text() == "<b>1 task unfinished</b> (1 running).",
            what=dialog.title.text,
        )
        assert "1 will be marked failed" in dialog.body.text()
        assert "start over" not in dialog.body.text()
        await until(lambda: quits == [True], what="quit once nothing is left to decide")
        assert not dialog.isVisible()


async def test_sigterm_to_the_app_is_reported_as_a_signal_not_as_your_quit(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real launch path (launch.main, its SIGTERM handler) with a task running and one
    queued; SIGTERM arrives from outside. The next start does not say "you quit"."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    monkeypatch.setattr(app_module, "Core", functools.partial(Core, engine=slow_engine()))
    args = launch_args(data_dir)
    qsettings = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    app = asyncio.ensure_future(launch.main(args, qsettings))
    await until(lambda: the_window(data_dir) is not None, what="the main window")
    window = the_window(data_dir)
    assert window is not None
    core = window.core

    async def demo_listed() -> bool:  # the launch scans model folders while it serves
        return any(model.id == MODEL for model in await core.models())

    await until(demo_listed, what="the demo model listed")
    await two_unfinished(core, window)
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(app, 30) == 0
    monkeypatch.undo()

    async with open_app(qtbot, data_dir, engine=slow_engine()) as (_core, window):
        report = window.dialog
        assert isinstance(report, RecoveryDialog)
        title = report.findChildren(type(report.summary))[0].text()
        assert (
            "Recovered 2 tasks after LMSP Desktop was stopped by a signal (SIGTERM) "
            "with 2 tasks unfinished" in title
        )
        assert "you quit" not in title and "unclean" not in title
        await window.open_last_report()  # Help ▸ Last recovery report says the same
        assert "stopped by a signal (SIGTERM)" in window.dialog.report.cause()
