"""A filter that matches nothing (the twenty-first walk): the table stood empty with no word,
as if the tasks were gone. It now says "No task matches 'zzz'" over the table and how to
leave the filter, which Esc does from the filter box and from the table. A real core (store,
runner, HTTP service) under the real MainWindow; a scripted engine keeps a task running."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel

from lmsp_desktop.gui.main_window import MainWindow
from tests.integration.gui_windows import MODEL, open_app, slow_engine
from tests.support.polling import until

pytestmark = pytest.mark.gui


def said(window: MainWindow) -> str:
    """The words shown over the tasks table ("" when none is)."""
    labels = window.tasks.table.viewport().findChildren(QLabel)
    shown = [label.text() for label in labels if label.isVisibleTo(window)]
    return " ".join(re.sub("<[^>]+>", " ", text).strip() for text in shown)


async def test_a_filter_matching_nothing_says_so_and_how_to_clear_it(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=slow_engine()) as (core, window):
        window.resize(1000, 700)
        tasks = window.tasks
        running = await core.submit(MODEL, "a story")
        done = await core.submit(MODEL, "another")
        await core.cancel(done)
        await until(lambda: tasks.model.rowCount() == 2, what=tasks.model.rowCount)
        assert said(window) == ""

        tasks.search.setFocus()
        QTest.keyClicks(tasks.search, "zzz")
        await until(lambda: tasks.model.rowCount() == 0, what=tasks.model.rowCount)
        await until(lambda: said(window) != "", what="a line over the empty table")
        assert re.fullmatch(r"No task matches 'zzz'\s+Esc clears the filter", said(window))
        viewport = tasks.table.viewport()
        assert tasks.no_match.geometry() == viewport.rect()  # over the table, centred
        assert tasks.no_match.isVisible() and tasks.stack.currentWidget() is tasks.splitter

        # Esc from the table too (the focus is there after a click on it).
        qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton)
        tasks.table.setFocus()
        QTest.keyClick(tasks.table, Qt.Key.Key_Escape)
        assert tasks.search.text() == ""
        await until(lambda: tasks.model.rowCount() == 2, what=tasks.model.rowCount)
        assert said(window) == ""

        # A chip that lists nothing says which, and the way back.
        tasks.chips.button(5).click()  # Failed
        await until(lambda: said(window) != "", what="a line for the Failed chip")
        assert re.fullmatch(r"No failed tasks\s+Choose All to see every task", said(window))
        # Running lists the running task until it ends and leaves the list.
        tasks.chips.button(3).click()
        await until(lambda: tasks.model.rowCount() == 1, what=tasks.model.rowCount)
        assert said(window) == ""
        await core.cancel(running)
        await until(lambda: said(window) != "", what="the line once the last task left")
        assert said(window).startswith("No running tasks"), said(window)
        tasks.chips.button(0).click()
        await until(lambda: tasks.model.rowCount() == 2, what=tasks.model.rowCount)
        assert said(window) == ""
