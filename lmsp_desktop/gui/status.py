"""The status bar: service URL (click to copy), a loopback warning, counts, tokens/s, database."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication, QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QStatusBar, QWidget

from lmsp_desktop.gui.format import human_size, is_loopback
from lmsp_desktop.gui.sparkline import TokenRate

# Task counts are listed in this order (live ones first), here and in the sidebar.
ORDER = (
    "running",
    "loading",
    "queued",
    "cancelling",
    "completed",
    "incomplete",
    "failed",
    "cancelled",
)


class StatusBar(QStatusBar):
    """Always-visible facts about the service; nothing here lies about state."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.url_label = QLabel()
        self.url_label.setToolTip("Click to copy the service URL")
        self.url_label.linkActivated.connect(self.copy_url)
        self.warning = QLabel()
        self.warning.setStyleSheet(
            "QLabel { background: #e0a100; color: black; border-radius: 6px; padding: 1px 6px; }"
        )
        self.warning.hide()
        # Paused from the tray (or while Quit waits): clients get 503 for new work, say so.
        self.paused_chip = QLabel("Paused")  # short: the sidebar and tooltip say the rest
        self.paused_chip.setToolTip(
            "New work is refused: clients get 503 'paused' for new requests; accepted tasks "
            "still finish. "
            "Choose Resume new work in the sidebar (or untick Pause new work in the tray menu) "
            "to take new work again."
        )
        self.paused_chip.setStyleSheet(
            "QLabel { background: #e0a100; color: black; border-radius: 6px; padding: 1px 6px; }"
        )
        self.paused_chip.hide()
        self.db_label = QLabel()
        # The counts and passing messages give way (elided by the bar, whole on hover) so
        # that chips appearing never make the window wider than 900 px; the sidebar has the
        # counts too.
        self.counts_label = ElidingLabel()
        self.rate = TokenRate()
        self.addWidget(self.url_label)
        self.addWidget(self.warning)
        self.addWidget(self.paused_chip)
        self.addWidget(self.counts_label, 1)
        self.message = ElidingLabel()
        # As wide as its text while there is room (the counts give way first); with the
        # counts' Ignored policy it got no width at all and no message was ever seen.
        self.message.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.message.setStyleSheet("color: palette(highlight)")
        self._message_timer = QTimer(self, singleShot=True)
        self._message_timer.timeout.connect(self.clearMessage)
        self.addWidget(self.message)
        self.addPermanentWidget(self.rate)
        self.addPermanentWidget(self.db_label)
        self.url = ""

    def set_service(self, url: str, host: str, remote_url: str | None = None) -> None:
        """`url`: this machine's; `remote_url`: other devices' (serving on the network)."""
        self.url = url
        # Beyond loopback the warning chip says so (other devices' address in its tooltip).
        scope = " (loopback only)" if is_loopback(host) else ""
        self.url_label.setText(
            f"● Serving on <a href='{url}'>{url}</a>{scope}" if url else "Service not started"
        )
        self.warning.setText("⚠ reachable from other machines")
        where = f" at {remote_url}/v1" if remote_url else ""
        listening = "every network interface" if host in ("0.0.0.0", "::", "") else host
        self.warning.setToolTip(
            f"Listening on {listening}: other machines on the network can connect{where}."
        )
        self.warning.setVisible(bool(url) and not is_loopback(host))

    def set_paused(self, paused: bool) -> None:
        self.paused_chip.setVisible(paused)

    def copy_url(self, *_: object) -> None:
        """Copy the base URL clients need (with /v1, as OpenAI SDKs and chat apps want it)."""
        QGuiApplication.clipboard().setText(f"{self.url}/v1")
        self.showMessage("URL copied ✓", 2500)  # short: whole beside the network chip at 900 px

    # Temporary messages go to their own label, so they never hide the URL and the counts
    # (QStatusBar's own message replaces every normal widget while it shows).
    def showMessage(self, text: str, timeout: int | None = 0) -> None:
        self.message.setText(text)
        self.message.setToolTip(text)
        self._message_timer.stop()
        if timeout:
            self._message_timer.start(timeout)

    def currentMessage(self) -> str:
        return self.message.text()

    def clearMessage(self) -> None:
        self.message.clear()

    def set_database(self, path: Path) -> None:
        size = sum(os.path.getsize(p) for p in (path, Path(f"{path}-wal")) if p.exists())
        self.db_label.setText(f"{path.name} {human_size(size)}")
        self.db_label.setToolTip(str(path))

    def set_counts(self, counts: dict[str, int]) -> None:
        parts = [f"{counts[s]} {s}" for s in ORDER if counts.get(s)]
        self.counts_label.setText(" · ".join(parts) if parts else "no tasks")
        self.counts_label.setToolTip(self.counts_label.text())


class ElidingLabel(QLabel):
    """A plain-text label the bar may narrow below its text's width: it then ends in "…"
    (never a word cut in half) and its tooltip keeps the whole text."""

    def __init__(self) -> None:
        super().__init__()
        # Never narrower than its "…": squeezed out entirely (a status message beside it at
        # 900 px) the counts vanished without a trace; the "…" says there is more to hover.
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("…") + 1)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setPen(self.palette().color(self.foregroundRole()))
        rect = self.contentsRect()
        text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter.drawText(
            rect, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), text
        )
        painter.end()

    def shown_text(self) -> str:
        return self.fontMetrics().elidedText(
            self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width()
        )
