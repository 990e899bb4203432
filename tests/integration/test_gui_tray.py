"""The tray (issue 16, defect 10): a right click opens the tray's menu and leaves the window
where it is, so "Pause new work" can be reached and really pauses the service; a left or
double click brings the window back; closing the window to the tray says so, once.

The offscreen platform has no system tray, so `QSystemTrayIcon.isSystemTrayAvailable()` is
answered yes here (under a real X tray it is yes anyway); the tray icon, its menu, the window,
the core and the HTTP service are the real ones. The clicks arrive as the platform delivers
them: the icon's `activated` signal with its reason, and, for a right click, the menu popped
up at the cursor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QAction
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui import main_window
from tests.integration.gui_windows import MODEL, client_token, open_app
from tests.support.polling import until

# What the offscreen platform says about the things it lacks (a tray, raising, key grabs).
OFFSCREEN = ("systemTrayWindowChanged", "does not support raise", "does not support grabbing")
pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore(*OFFSCREEN)]


class TrayAnywhere(QSystemTrayIcon):
    """A real tray icon that also exists offscreen and remembers the notices it showed."""

    notices: ClassVar[list[tuple[str, str]]] = []

    @staticmethod
    def isSystemTrayAvailable() -> bool:
        return True

    def showMessage(self, title: str, text: str, *args: Any) -> None:  # type: ignore[override]
        TrayAnywhere.notices.append((title, text))
        super().showMessage(title, text, *args)


@pytest.fixture
def tray(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[TrayAnywhere]]:
    monkeypatch.setattr(main_window, "QSystemTrayIcon", TrayAnywhere)
    TrayAnywhere.notices = []
    yield TrayAnywhere


def action(menu: QMenu, text: str) -> QAction:
    for candidate in menu.actions():
        if candidate.text() == text:
            return candidate
    raise AssertionError(f"no {text!r} in {[a.text() for a in menu.actions()]}")


async def create_status(url: str, token: str) -> tuple[int, str]:
    """A client's `POST /v1/responses`: its status and error code, if any."""
    body = {"model": MODEL, "input": "hi", "background": True}
    async with (
        aiohttp.ClientSession(url) as http,
        http.post(
            "/v1/responses", json=body, headers={"Authorization": f"Bearer {token}"}
        ) as answer,
    ):
        data = await answer.json()
    return answer.status, (data.get("error") or {}).get("code", "")


async def right_click(tray_icon: QSystemTrayIcon) -> QMenu:
    """What the platform does on a right click: tell the app (Context), pop the menu up."""
    tray_icon.activated.emit(QSystemTrayIcon.ActivationReason.Context)
    menu = tray_icon.contextMenu()
    assert menu is not None, "the tray icon has no menu"
    menu.popup(QPoint(200, 200))
    await until(menu.isVisible, what="the tray menu shown")
    return menu


async def test_right_click_shows_the_menu_whose_pause_refuses_new_work(
    qtbot: Any, tmp_path: Path, tray: type[TrayAnywhere]
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        token = await client_token(core)
        window.close()  # to the tray
        assert window.isHidden()
        menu = await right_click(window.tray)
        assert window.isHidden(), "a right click on the tray icon brought the window back"
        pause = action(menu, "Pause new work")
        QTest.mouseClick(menu, Qt.MouseButton.LeftButton, pos=menu.actionGeometry(pause).center())
        await until(lambda: not menu.isVisible(), what="the menu closed after the choice")
        assert window.isHidden()
        assert await create_status(core.url, token) == (503, "paused")
        window.tray.activated.emit(QSystemTrayIcon.ActivationReason.Trigger)
        await until(window.isVisible, what="the window back")
        chip = window.status.paused_chip
        assert chip.isVisible() and "Paused" in chip.text()  # the window says so too
        window.close()

        menu = await right_click(window.tray)
        assert pause.isChecked()  # the menu shows that new work is paused
        QTest.mouseClick(menu, Qt.MouseButton.LeftButton, pos=menu.actionGeometry(pause).center())
        status, _ = await create_status(core.url, token)
        assert status == 202
        assert window.isHidden()
        assert not window.status.paused_chip.isVisibleTo(window)


async def test_left_or_double_click_brings_the_window_back(
    qtbot: Any, tmp_path: Path, tray: type[TrayAnywhere]
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (_core, window):
        window.close()
        assert window.isHidden()
        window.tray.activated.emit(QSystemTrayIcon.ActivationReason.Trigger)
        await until(window.isVisible, what="the window back after a left click")
        window.showMinimized()
        await until(window.isMinimized, what="minimised")
        window.tray.activated.emit(QSystemTrayIcon.ActivationReason.DoubleClick)
        await until(lambda: not window.isMinimized(), what="restored after a double click")


async def test_closing_to_the_tray_says_so_once(
    qtbot: Any, tmp_path: Path, tray: type[TrayAnywhere]
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        quits: list[bool] = []
        window.quit_requested.connect(lambda: quits.append(True))
        window.close()
        assert window.isHidden() and not quits  # still serving, from the tray
        assert len(tray.notices) == 1, tray.notices
        title, text = tray.notices[0]
        assert "keeps serving" in title and "Quit" in text
        window.show()
        window.close()
        assert window.isHidden()
        assert len(tray.notices) == 1, "the notice came again"
        async with aiohttp.ClientSession(core.url) as http, http.get("/v1/health") as answer:
            assert answer.status == 200
