"""The sidebar under a larger font (the twenty-first walk, GTK's Adwaita): it was a fixed
150 px, so Recent read "incomplete 3m a…" and "App memory: 212.6" wrapped its "MiB". It is
now as wide as its widest line at the current font, and fits again when the font changes.
A real core (store, runner, HTTP service, pairing) under the real MainWindow; a scripted
engine stops a task at a known token."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication, QLabel, QPushButton

from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.gui.main_window import MainWindow
from lmsp_desktop.gui.pages.sidebar import TASK_ID, Heading, ended_line
from tests.integration.gui_windows import (
    MODEL,
    client_token,
    open_app,
    post_background,
    slow_engine,
)
from tests.support.polling import until

pytestmark = pytest.mark.gui


@contextmanager
def application_font(scale: float) -> Iterator[None]:
    """The application's font `scale` times as big, as a desktop with a larger font gives
    it; the usual one back afterwards (the other tests share the application)."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    usual = app.font()
    bigger = app.font()
    bigger.setPointSizeF(usual.pointSizeF() * scale)
    app.setFont(bigger)
    try:
        yield
    finally:
        app.setFont(usual)


async def settle() -> None:
    for _ in range(5):  # the loop is Qt's: sleeping runs the resizes and fits
        await asyncio.sleep(0.05)


def cut(window: MainWindow) -> list[str]:
    """Every sidebar line that is wrapped, elided or clipped at the sidebar's width."""
    side = window.sidebar
    found = []
    for label in side.findChildren(QLabel):
        if not label.isVisible() or not label.text():
            continue
        room = label.contentsRect().width()
        if label.wordWrap():  # taller than its lines at any width: a line wrapped
            if label.heightForWidth(room) > label.heightForWidth(100_000):
                found.append(f"wrapped: {label.text()}")
        elif label.sizeHint().width() > room:
            found.append(f"clipped: {label.text()}")
        if "…" in re.sub("<[^>]+>", "", label.text()):
            found.append(f"elided: {label.text()}")
    for button in side.findChildren(QPushButton):
        if button.width() < button.sizeHint().width():
            found.append(f"clipped button: {button.text()}")
    nav = side.nav
    nav_room = nav.viewport().width() - max(nav.iconSize().width(), 16) - 12
    for i in range(nav.count()):
        text = nav.item(i).text()
        if nav.fontMetrics().horizontalAdvance(text) > nav_room:
            found.append(f"navigation: {text}")
    recent = side.recent
    if recent.count() and recent.sizeHintForColumn(0) > recent.viewport().width():
        found.append(f"recent: {side.recent_texts()}")
    # The longest a Recent line gets, which the entries here reach only in an hour.
    recent_room = recent.viewport().width() - recent.iconSize().width() - 12
    for state in TERMINAL:
        line = ended_line(state, 59 * 60)
        if recent.fontMetrics().horizontalAdvance(line) > recent_room:
            found.append(f"recent, in an hour: {line}")
    return found


async def test_no_sidebar_line_is_cut_under_a_larger_font_and_the_usual_width_stays(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        side = window.sidebar
        window.resize(900, 600)
        token = await client_token(core)
        running = await post_background(core, token)
        limited = await post_background(core, token, max_output_tokens=5)
        cancelled = await post_background(core, token)
        await core.cancel(cancelled)
        await until(lambda: side.recent.count() == 2, what=lambda: side.recent_texts())
        await until(lambda: "incomplete" in side.counts.text(), what=lambda: side.counts.text())
        await until(lambda: MODEL in side.loaded.text(), what="the loaded model")
        await until(lambda: "App memory" in side.memory.text(), what="the app's memory")
        await core.pairing.start("Ana's laptop", frozenset({"models:read"}), "192.168.1.23")
        await until(lambda: "waiting" in window.nav.item(2).text(), what="the pairing request")
        await settle()
        assert not cut(window), cut(window)
        usual = side.width()
        assert usual <= 160  # narrow at the usual font: at 900 px the Tasks page needs room

        with application_font(1.5):
            await settle()
            assert not cut(window), cut(window)
            assert side.width() > usual
            # The headings grow with the text (a font of their own no longer followed it).
            heading = side.findChildren(Heading)[0].font().pointSizeF()
            assert heading > side.font().pointSizeF() * 0.8, heading

            # Paused: the panel gets taller; if it scrolls, the lines keep their room.
            side.pause_button.click()
            await until(lambda: core.paused, what="paused")
            await settle()
            assert not [c for c in cut(window) if "Paused" not in c], cut(window)
            side.pause_button.click()
            await until(lambda: not core.paused, what="serving again")

        await settle()
        assert side.width() == usual and not cut(window), cut(window)
        await core.cancel(running)
        assert limited in {side.recent.item(i).data(TASK_ID) for i in range(side.recent.count())}
