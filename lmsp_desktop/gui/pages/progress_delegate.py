"""One progress-bar cell for every table: a download's bytes in the task table, a file being
hashed on the Models page."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QModelIndex, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QColor, QHelpEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from lmsp_desktop.gui.pages.column_fit import show_whole_text

FILL_ALPHA = 140  # the done part: a tint of the highlight, lighter than the selection
PADDING = 12  # px the trough's frame and the text's padding take beyond a plain cell's
LINE = 3  # px: the solid bar along the trough's foot that shows the fraction crisply


class ProgressBarDelegate(QStyledItemDelegate):
    """Paints a bar where the model gives a fraction (0..1) at `role`, with the cell's text
    over it; every other cell as usual.

    The bar is drawn to keep the text readable: a trough in the view's base colour, the done
    part as a light tint of the highlight with a thin solid line at its foot, and the text in
    the ordinary text colour over both, cut at its end when the column is narrow. Qt's own
    progress bar filled the done part with the selection's colour and switched the text to
    white inside it ("42.2 MiB / 93.8 MiB, wai|ting for the hub"): it looked like a selected
    cell and the text changed colour mid-word. A selected row's highlight runs round the
    trough, so the row still reads as selected."""

    def __init__(self, role: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = role

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        """Room for the text inside the trough's frame and padding (the column fits it)."""
        hint = super().sizeHint(option, index)
        if index.data(self.role) is not None:
            hint.setWidth(hint.width() + PADDING)
        return hint

    def helpEvent(
        self,
        event: QHelpEvent,
        view: QAbstractItemView,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> bool:
        """A cell cut at its end ("1.0 MiB / 3.0 MiB, waiting fo…") is whole in its tooltip,
        before what the model's tooltip says of it."""
        if event.type() != QEvent.Type.ToolTip or not index.isValid():
            return super().helpEvent(event, view, option, index)
        text = str(index.data(Qt.ItemDataRole.DisplayRole) or "")
        room = option.rect.width() - (PADDING + 8 if index.data(self.role) is not None else 8)
        if not text or option.fontMetrics.horizontalAdvance(text) <= room:
            return super().helpEvent(event, view, option, index)
        return show_whole_text(event, view, index)

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
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        text = opt.text
        opt.text = ""  # the row's background and selection only: the text goes on the bar
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)

        palette = opt.palette
        trough = QRect(opt.rect.adjusted(2, 3, -2, -3))
        done = QRect(trough)
        done.setWidth(round(trough.width() * max(0.0, min(1.0, float(fraction)))))
        tint = QColor(palette.color(QPalette.ColorRole.Highlight))
        tint.setAlpha(FILL_ALPHA)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        painter.fillRect(trough, palette.color(QPalette.ColorRole.Base))
        if done.width() > 0:
            painter.fillRect(done, tint)
            line = QRect(done.left(), done.bottom() - LINE + 1, done.width(), LINE)
            painter.fillRect(line, palette.color(QPalette.ColorRole.Highlight))
        painter.setPen(palette.color(QPalette.ColorRole.Mid))
        painter.drawRect(trough.adjusted(0, 0, -1, -1))
        painter.setPen(palette.color(QPalette.ColorRole.Text))
        room = trough.adjusted(4, 0, -4, -LINE)
        shown = opt.fontMetrics.elidedText(text, Qt.TextElideMode.ElideRight, room.width())
        painter.setFont(opt.font)
        painter.drawText(room, int(Qt.AlignmentFlag.AlignCenter), shown)
        painter.restore()
