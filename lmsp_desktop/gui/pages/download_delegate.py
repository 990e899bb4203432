"""The task table's Tokens cell of a download: a progress bar with its bytes."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QApplication,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionProgressBar,
    QStyleOptionViewItem,
)

from lmsp_desktop.gui.models.task_table import Role


class DownloadProgressDelegate(QStyledItemDelegate):
    """Paints a bar where the model gives a download's fraction (Role.PROGRESS); every other
    cell as usual."""

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        fraction = index.data(Role.PROGRESS)
        if fraction is None:
            super().paint(painter, option, index)
            return
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(2, 3, -2, -3)
        bar.minimum, bar.maximum = 0, 1000
        bar.progress = int(fraction * 1000)
        bar.text = str(index.data(Qt.ItemDataRole.DisplayRole))
        bar.textVisible = True
        bar.state = option.state
        widget = option.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter, widget)
