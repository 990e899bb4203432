"""Settings → Upstream servers: the registered OpenAI-compatible servers with their state,
and Add…/Remove, through the same core calls as `lmsp-desktop upstream add|remove`.

An API key typed here goes straight to the core (keyring or 0600 database); the window never
shows a stored key, only whether one is set.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.upstreams import DEFAULT_CONCURRENCY
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import title_width

HEADERS = ["Name", "URL", "Status", "Latency", "Models", "Key"]
REFRESH_MS = 1000  # the core probes on its own clock; the table follows it while shown


def status_text(status: dict[str, Any]) -> str:
    """Short enough for its column ("✗ down: cannot …" was cut); the reason is its tooltip."""
    return "● up" if status["reachable"] else "✗ down"


class UpstreamsSection(QGroupBox):
    """The upstreams list inside the Settings dialog; Add and Remove apply at once (and
    say so)."""

    def __init__(self, core: CoreApi, parent: QWidget | None = None) -> None:
        super().__init__("Upstream servers (models appear as NAME/<model>)", parent)
        self.core = core
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # URLs keep both ends
        # The table fills the tab (it floated, 120 px tall, in the middle); the URL takes the
        # room left, the short columns their content's width.
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(HEADERS.index("URL"), QHeaderView.ResizeMode.Stretch)
        self.add_button = QPushButton("Add…")
        self.add_button.clicked.connect(self._ask)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(lambda: aio.spawn(self.remove_selected(), self))
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #e04848")
        buttons = QVBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch()
        row = QHBoxLayout()
        row.addWidget(self.table, 1)
        row.addLayout(buttons)
        # Said plainly: these apply at once, unlike the rest of Settings (a server added is
        # probed and its models offered right away; Cancel does not take it back).
        self.note = QLabel(
            "Add and Remove take effect at once: they are not undone by Cancel and need no Save."
        )
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addLayout(row, 1)
        layout.addWidget(self.note)
        layout.addWidget(self.error)
        self.dialog: UpstreamDialog | None = None
        self._timer = QTimer(self, interval=REFRESH_MS)  # runs only while shown
        self._timer.timeout.connect(self.refresh)
        self.refresh()

    def showEvent(self, event: QShowEvent) -> None:
        self.refresh()
        self._timer.start()
        super().showEvent(event)

    def hideEvent(self, event: QHideEvent) -> None:
        # Stopped here, on the GUI thread: a timer still running when Python collects the
        # dialog elsewhere would be stopped from another thread (a Qt warning).
        self._timer.stop()
        super().hideEvent(event)

    def refresh(self) -> None:
        statuses = self.core.upstream_statuses()
        self.table.setRowCount(len(statuses))
        for r, status in enumerate(statuses):
            latency = status["latency_ms"]
            cells = [
                status["name"],
                status["base_url"],
                status_text(status),
                "—" if latency is None else f"{latency:.0f} ms",
                str(status["model_count"]),
                "set" if status["key_store"] != "none" else "none",
            ]
            tips = {
                1: status["base_url"],
                2: status.get("error") or "answering",
                4: ", ".join(status["models"]),
            }
            for c, text in enumerate(cells):
                item = self.table.item(r, c)
                if item is None:
                    item = QTableWidgetItem(text)
                    self.table.setItem(r, c, item)
                elif item.text() != text:
                    item.setText(text)
                if c in tips:
                    item.setToolTip(tips[c] or "no models listed")

    def _ask(self) -> None:
        self.dialog = UpstreamDialog(self.core, self)
        # Deleted on the GUI thread once closed (its line edits own blink timers).
        self.dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.dialog.accepted.connect(self.refresh)
        self.dialog.open()

    async def remove_selected(self) -> None:
        rows = {i.row() for i in self.table.selectedIndexes()}
        if not rows:
            self.error.setText("Select an upstream to remove.")
            return
        self.remove_button.setEnabled(False)
        try:
            names = [self.table.item(row, 0) for row in sorted(rows)]
            for item in names:
                if item is not None:
                    await self.core.remove_upstream(item.text())
            self.error.setText("")
        except LmspError as exc:
            self.error.setText(exc.message)
        finally:
            self.remove_button.setEnabled(True)
            self.refresh()


class UpstreamDialog(QDialog):
    """Name, URL, optional API key (typed, never shown back) and concurrency."""

    def __init__(self, core: CoreApi, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add an upstream server")
        self.setMinimumWidth(title_width(self.windowTitle(), self.fontMetrics()))
        self.core = core
        self.name = QLineEdit(placeholderText="gpu")
        self.url = QLineEdit(placeholderText="http://gpu-box:8000/v1")
        self.key = QLineEdit(placeholderText="only if the server asks for one")
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.concurrency = QSpinBox(minimum=1, maximum=256, value=DEFAULT_CONCURRENCY)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #e04848")
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("URL", self.url)
        form.addRow("API key", self.key)
        form.addRow("At once", self.concurrency)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(lambda: aio.spawn(self.save(), self))
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)

    async def save(self) -> None:
        self.buttons.setEnabled(False)
        try:
            await self.core.add_upstream(
                self.name.text().strip(),
                self.url.text().strip(),
                self.key.text() or None,
                self.concurrency.value(),
            )
        except LmspError as exc:
            self.error.setText(exc.message)
            return
        finally:
            self.buttons.setEnabled(True)
        self.key.clear()
        self.accept()
