"""The progress-bar cell (gui/pages/progress_delegate.py) fills from left to right: a user
walk saw Fusion paint it as a vertical bar rising from the cell's bottom edge (19% a thin
strip along the bottom, 0% like an underline), because the style option said no
orientation."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QTableView

from lmsp_desktop.gui.pages.progress_delegate import ProgressBarDelegate

pytestmark = pytest.mark.gui
FRACTION = Qt.ItemDataRole.UserRole + 7


def test_a_half_done_bar_is_filled_on_its_left_half_only(qtbot: Any) -> None:
    model = QStandardItemModel(1, 1)
    item = QStandardItem("reading prompt 1,024/2,048 (50%)")
    item.setData(0.5, FRACTION)
    model.setItem(0, 0, item)
    table = QTableView()
    qtbot.addWidget(table)
    table.setModel(model)
    table.setItemDelegate(ProgressBarDelegate(FRACTION, table))
    table.setColumnWidth(0, 400)
    table.setRowHeight(0, 28)
    table.clearSelection()
    table.resize(480, 120)
    table.show()
    qtbot.waitExposed(table)
    rect = table.visualRect(model.index(0, 0))
    image = table.viewport().grab().toImage()
    highlight = table.palette().highlight().color()

    def filled(x: int, y: int) -> bool:
        """The bar's chunk (the highlight's hue, shaded) rather than its light trough."""
        colour = image.pixelColor(x, y)
        return colour.blue() - colour.red() > (highlight.blue() - highlight.red()) // 2

    # Near each end (clear of the centred text), near the top and the bottom edge: half done
    # is filled on the left, top and bottom, and empty on the right. A vertical bar half
    # full is filled along its bottom on both sides and empty along its top.
    left, right = rect.left() + rect.width() // 10, rect.right() - rect.width() // 10
    top, bottom = rect.top() + 6, rect.bottom() - 6
    seen = {(x, y): filled(x, y) for x in (left, right) for y in (top, bottom)}
    assert seen == {
        (left, top): True,
        (left, bottom): True,
        (right, top): False,
        (right, bottom): False,
    }
