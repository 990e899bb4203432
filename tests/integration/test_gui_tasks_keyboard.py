"""The Tasks page by keyboard, in the real window over a real core (a scripted engine keeps
the tasks running): Tab walks from the filter through Try a prompt…, the table (one stop),
the details' Copy id and Cancel, the Output/Events/Request tabs and the sidebar's Pause, and
never changes the selected task; the focused table outlines its current row; the arrows still
move within the table. (Tab walked the table cell by cell and moved the selection at each
row's end: nothing after the table was reachable, and the details pane switched task.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QWidget

from lmsp_desktop.gui.main_window import MainWindow
from tests.integration.gui_windows import MODEL, open_app, slow_engine
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def focused(window: MainWindow, widget: QWidget) -> None:
    window.activateWindow()
    widget.setFocus(Qt.FocusReason.OtherFocusReason)
    await until(widget.hasFocus, what=lambda: window.focusWidget())


def luminance(colour: QColor) -> float:
    """WCAG 2's relative luminance."""

    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return (
        0.2126 * channel(colour.redF())
        + 0.7152 * channel(colour.greenF())
        + 0.0722 * channel(colour.blueF())
    )


def contrast(a: QColor, b: QColor) -> float:
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def outline_pixels(window: MainWindow, row: int) -> int:
    """How many pixels down the row's left edge stand out from the row's background (the
    selection's colour on a selected row, the base colour on another) as WCAG asks of a
    control's outline (3:1): the focus outline, where it shows. A darker Highlight, dashed,
    was faint on a selected row (the twenty-first walk: 1.8:1)."""
    table = window.tasks.table
    image = table.viewport().grab().toImage()
    rect = table.row_rect(row)
    selected = table.selectionModel().isRowSelected(row)
    role = QPalette.ColorRole.Highlight if selected else QPalette.ColorRole.Base
    background = table.palette().color(role)
    return sum(
        1
        for y in range(rect.top() + 2, rect.bottom() - 1)
        for x in (rect.left() + 1, rect.left() + 2)
        if contrast(QColor(image.pixel(x, y)), background) >= 3.0
    )


async def test_tab_walks_past_the_table_to_the_details_and_sidebar_and_keeps_the_selection(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=slow_engine()) as (core, window):
        window.resize(1200, 780)
        tasks = window.tasks
        ids = [await core.submit(MODEL, f"story {i}") for i in range(3)]
        await until(lambda: all(tasks.model.row_of(i) is not None for i in ids))
        chosen = ids[1]
        tasks.show_task(chosen)
        await until(lambda: tasks.details.cancel_button.isEnabled(), what="details Cancel")
        await focused(window, tasks.search)

        walk: list[QWidget] = []
        for _ in range(14):
            QTest.keyClick(window.focusWidget(), Qt.Key.Key_Tab)
            walk.append(window.focusWidget())
            # Tab never moves the selection: the pane keeps the task chosen.
            assert tasks.selected_ids() == [chosen]
            assert tasks.details.task_id == chosen
        details, sidebar = tasks.details, window.sidebar
        for wanted in (
            tasks.try_button,
            tasks.table,
            details.copy_button,
            details.cancel_button,
            details.tabs.tabBar(),
            sidebar.nav,
            sidebar.pause_button,
            tasks.search,  # round again
        ):
            assert wanted in walk, (wanted, [type(w).__name__ for w in walk])
        # One stop in the table, in reading order.
        at = walk.index(tasks.table)
        assert walk.count(tasks.table) == 1
        assert walk[at - 1] is tasks.try_button and walk[at + 1] is details.copy_button

        # Back into the table: its current row is outlined while it has the focus, and
        # not once the focus leaves it.
        await focused(window, details.copy_button)
        QTest.keyClick(details.copy_button, Qt.Key.Key_Backtab)
        assert window.focusWidget() is tasks.table
        row = tasks.model.row_of(chosen)
        assert row is not None and tasks.table.currentIndex().row() == row
        assert outline_pixels(window, row) > 10
        QTest.keyClick(tasks.table, Qt.Key.Key_Tab)
        assert window.focusWidget() is details.copy_button
        assert outline_pixels(window, row) == 0
        # The arrows still move within the table: Down selects the next task.
        QTest.keyClick(details.copy_button, Qt.Key.Key_Backtab)
        QTest.keyClick(tasks.table, Qt.Key.Key_Down)
        following = tasks.model.task_id(row + 1)
        assert tasks.selected_ids() == [following]
        await until(lambda: details.task_id == following)
        assert outline_pixels(window, row + 1) > 10
        # Ctrl+Up moves the current row without selecting it: outlined there too, on the
        # row's own background, and the selected row left without one.
        QTest.keyClick(tasks.table, Qt.Key.Key_Up, Qt.KeyboardModifier.ControlModifier)
        assert tasks.table.currentIndex().row() == row
        assert tasks.selected_ids() == [following]
        await until(lambda: outline_pixels(window, row) > 10, what="the outline moved")
        assert outline_pixels(window, row + 1) == 0
        for task_id in ids:
            await core.cancel(task_id)


async def test_ctrl_c_says_the_id_was_copied_and_escape_clears_the_filter(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=slow_engine()) as (core, window):
        window.resize(1200, 780)
        tasks = window.tasks
        ids = [await core.submit(MODEL, f"story {i}") for i in range(2)]
        await until(lambda: all(tasks.model.row_of(i) is not None for i in ids))
        tasks.show_task(ids[0])
        await focused(window, tasks.table)
        QGuiApplication.clipboard().clear()
        QTest.keyClick(tasks.table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
        assert QGuiApplication.clipboard().text() == ids[0]
        assert window.status.message.text() == "Id copied ✓"  # as "URL copied ✓" is said
        # The details' Copy id says so on the button.
        tasks.details.copy_button.click()
        assert tasks.details.copy_button.text() == "Copied ✓"
        await until(lambda: tasks.details.copy_button.text() == "Copy id", what="its word back")

        # Escape in the filter box clears the filter: every task listed again.
        await focused(window, tasks.search)
        QTest.keyClicks(tasks.search, ids[1][-8:])
        await until(lambda: tasks.model.rowCount() == 1, what=tasks.model.rowCount)
        QTest.keyClick(tasks.search, Qt.Key.Key_Escape)
        assert tasks.search.text() == ""
        await until(lambda: tasks.model.rowCount() == 2, what=tasks.model.rowCount)
        for task_id in ids:
            await core.cancel(task_id)
