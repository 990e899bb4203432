"""One progress-bar cell for every table: a download's bytes in the task table, a file being
hashed on the Models page."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QApplication,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionProgressBar,
    QStyleOptionViewItem,
    QWidget,
)


class ProgressBarDelegate(QStyledItemDelegate):
    """Paints a bar where the model gives a fraction (0..1) at `role`, with the cell's text on
    it; every other cell as usual."""

    def __init__(self, role: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = role

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        fraction = index.data(self.role)
        if fraction is None:
            super().paint(painter, option, index)
            return
        widget = option.widget
        style = widget.style() if widget is not None else QApplication.style()
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(2, 3, -2, -3)
        bar.minimum, bar.maximum = 0, 1000
        bar.progress = int(fraction * 1000)
        bar.text = str(index.data(Qt.ItemDataRole.DisplayRole))
        bar.textVisible = True
        # Qt 6's option has no orientation of its own: without this flag, Fusion paints a
        # vertical bar rising from the cell's bottom edge.
        bar.state = option.state | QStyle.StateFlag.State_Horizontal
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter, widget)
