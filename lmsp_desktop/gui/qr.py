"""A QR code painted from segno's module matrix (always dark on light: scanners need it)."""

from __future__ import annotations

import segno
from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

QUIET_ZONE = 4  # modules of light border the QR specification asks for


class QrWidget(QWidget):
    """Shows `text` as a QR code, scaled to the widget, square."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.setMinimumSize(180, 180)
        self._matrix: list[bytes] = []
        self.set_text(text)

    def set_text(self, text: str) -> None:
        self.text = text
        self._matrix = [bytes(row) for row in segno.make(text, error="m").matrix] if text else []
        self.setToolTip(text)
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(220, 220)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        side = min(self.width(), self.height())
        painter.fillRect(0, 0, side, side, QColor("white"))
        if not self._matrix:
            return
        count = len(self._matrix) + 2 * QUIET_ZONE
        module = side / count
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor("black"))
        for y, row in enumerate(self._matrix):
            for x, dark in enumerate(row):
                if dark:
                    painter.drawRect(
                        QRectF(
                            (x + QUIET_ZONE) * module,
                            (y + QUIET_ZONE) * module,
                            module + 0.5,
                            module + 0.5,
                        )
                    )
        painter.end()
