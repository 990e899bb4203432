"""A small tokens/s sparkline for the status bar, painted with QPainter (no QtCharts)."""

from __future__ import annotations

from collections import deque

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPaintEvent, QPen
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget

LINE = "#3d85e0"  # the running colour: the line moves only while something generates


class Sparkline(QWidget):
    """The last `length` samples as a line, scaled to the largest of them."""

    def __init__(self, length: int = 60, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.samples: deque[float] = deque([0.0] * length, maxlen=length)
        self.setFixedSize(QSize(length * 2, 16))

    def add(self, value: float) -> None:
        self.samples.append(max(0.0, value))
        self.update()

    def points(self) -> list[QPointF]:
        """Where each sample is drawn: x left to right, y up from the bottom edge."""
        top = max(self.samples) or 1.0
        w, h = self.width() - 1, self.height() - 2
        step = w / max(1, len(self.samples) - 1)
        return [QPointF(i * step, 1 + h - h * v / top) for i, v in enumerate(self.samples)]

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        baseline = QColor(self.palette().color(self.foregroundRole()))
        baseline.setAlpha(60)
        painter.setPen(QPen(baseline, 1))
        painter.drawLine(0, self.height() - 1, self.width(), self.height() - 1)
        points = self.points()
        path = QPainterPath(points[0])
        for point in points[1:]:
            path.lineTo(point)
        painter.setPen(QPen(QColor(LINE), 1.5, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        painter.drawPath(path)
        painter.end()


class TokenRate(QWidget):
    """Sparkline plus the latest rate as words ("48 tok/s"), fed once a second."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sparkline = Sparkline()
        self.label = QLabel("0 tok/s")
        self.label.setMinimumWidth(70)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.sparkline)
        layout.addWidget(self.label)
        self.setToolTip("Output tokens committed per second, last minute")

    def add(self, tokens: int, seconds: float) -> None:
        rate = tokens / seconds if seconds > 0 else 0.0
        self.sparkline.add(rate)
        self.label.setText(f"{rate:.0f} tok/s")
