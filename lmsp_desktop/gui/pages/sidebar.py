"""The left column: page navigation with live counters, then what a glance should tell —
whether the service takes work and where, how many tasks are in each state, which models
hold memory, and what finished lately. A view only: it shows what the window hears from the
core (counts, model states, task changes) and asks the window to act."""

from __future__ import annotations

import html
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPainter, QPaintEvent, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.models.machine import resident_memory
from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.core.views import TaskChange, TaskRow
from lmsp_desktop.gui.format import STATE_COLOURS, human_size, short_id, state_icon, why_ended
from lmsp_desktop.gui.status import ORDER  # the status bar lists the counts in the same order

WIDTH = 150  # narrow: at 900 px the Tasks page needs the rest
RECENT = 4  # finished tasks listed under "Recent"
HEADING_SHARE = 0.7  # a heading's colour: this much of the text's, the rest the window's
TASK_ID = Qt.ItemDataRole.UserRole + 1


@dataclass
class Finished:
    task_id: str
    state: str
    model: str
    at: float
    why: str = ""  # an incomplete one's reason, once its row has been read


def ago(seconds: float) -> str:
    """How long ago, short enough for the sidebar: "12s", "3m", "2h", "4d"."""
    if seconds < 60:
        return f"{max(0, int(seconds))}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


def ended_line(state: str, seconds: float) -> str:
    """A Recent entry's second line: "cancelled 12s ago". Said as a time ago, never
    "cancelled · 12s", which read as how long the task ran (the table's Duration beside it
    said 10.5 s)."""
    return f"{state} {ago(seconds)} ago"


def muted(text: QColor, background: QColor, share: float = HEADING_SHARE) -> QColor:
    """`text` toned down towards `background`: quieter than the text, as readable in a dark
    palette as in a light one."""

    def mix(t: float, b: float) -> float:
        return t * share + b * (1 - share)

    return QColor.fromRgbF(
        mix(text.redF(), background.redF()),
        mix(text.greenF(), background.greenF()),
        mix(text.blueF(), background.blueF()),
    )


class Heading(QLabel):
    """A section heading (SERVICE, TASKS…): small bold capitals in a muted text colour, worked
    out from the palette at each paint. It was `palette(mid)`, a frame shade: in a dark
    palette (Adwaita dark) about the window's own colour, so the headings all but vanished."""

    def __init__(self, text: str) -> None:
        super().__init__(text.upper())
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 0.85)
        font.setBold(True)
        self.setFont(font)
        self.setContentsMargins(0, 8, 0, 0)

    def colour(self) -> QColor:
        palette = self.palette()
        return muted(
            palette.color(QPalette.ColorRole.WindowText), palette.color(QPalette.ColorRole.Window)
        )

    def paintEvent(self, _event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setPen(self.colour())
        painter.setFont(self.font())
        painter.drawText(self.contentsRect(), int(self.alignment()), self.text())


def _heading(text: str) -> QLabel:
    return Heading(text)


def _wrapping(label: QLabel) -> QLabel:
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
    return label


class Sidebar(QWidget):
    """Navigation (`nav`, rows Tasks, Models, Clients) and the service at a glance."""

    pause_toggled = Signal(bool)
    task_clicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFixedWidth(WIDTH)
        self.nav = QListWidget()
        self.nav.addItems(["Tasks", "Models", "Clients"])
        self.nav.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.nav.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.nav.setFrameShape(QFrame.Shape.NoFrame)
        rows = self.nav.fontMetrics().height() + 10  # roomy enough to click
        for i in range(self.nav.count()):
            self.nav.item(i).setSizeHint(QSize(WIDTH - 4, rows))
        self.nav.setFixedHeight(rows * self.nav.count() + 4)

        self.url = ""
        # Why a finished task ended, from its row as the window last read it ("" unknown).
        self.describe: Callable[[str], str] = lambda _task_id: ""
        self.service = _wrapping(QLabel())
        self.address = QLabel()
        self.address.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.copy_button = QPushButton("Copy URL")
        self.copy_button.setToolTip("Copy the base URL clients need (with /v1)")
        self.copy_button.clicked.connect(self.copy_url)
        self.pause_button = QPushButton("Pause new work")
        self.pause_button.setCheckable(True)
        self.pause_button.setToolTip(
            "Refuse new requests (they get 503) while accepted tasks finish"
        )
        self.pause_button.toggled.connect(self.pause_toggled)
        self.counts = _wrapping(QLabel())
        self.loaded = _wrapping(QLabel())
        self.memory = _wrapping(QLabel())
        self.recent = QListWidget()
        self.recent.setFrameShape(QFrame.Shape.NoFrame)
        self.recent.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.recent.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.recent.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.recent.setIconSize(QSize(14, 14))
        self.recent.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.recent.setStyleSheet("QListWidget { background: transparent; }")
        self.recent.itemClicked.connect(lambda item: self.task_clicked.emit(item.data(TASK_ID)))
        self.recent_empty = _wrapping(QLabel("Nothing finished yet"))
        self._finished: deque[Finished] = deque(maxlen=RECENT)
        self._loaded: list[tuple[str, int | None, str]] = []

        # Below the navigation, the glance panel scrolls when it is taller than the window
        # (every state counted, two models loaded, paused): it never holds the window taller
        # than 600 px.
        panel = QWidget()
        panel_layout = QVBoxLayout(panel)
        panel_layout.setContentsMargins(0, 0, 0, 0)
        panel_layout.setSpacing(2)
        for widget in (
            _heading("Service"),
            self.service,
            self.address,
            self.copy_button,
            self.pause_button,
            _heading("Tasks"),
            self.counts,
            _heading("Loaded models"),
            self.loaded,
            self.memory,
            _heading("Recent"),
            self.recent_empty,
            self.recent,
        ):
            panel_layout.addWidget(widget)
        panel_layout.addStretch()
        self.glance = QScrollArea()
        self.glance.setWidget(panel)
        self.glance.setWidgetResizable(True)
        self.glance.setFrameShape(QFrame.Shape.NoFrame)
        self.glance.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.nav)
        layout.addWidget(self.glance, 1)
        self._clock = QTimer(self, interval=1000)  # "12 s ago" moves with the clock
        self._clock.timeout.connect(self._tick)
        self._clock.start()
        self.set_service("", paused=False)
        self.set_counts({})
        self.set_loaded([])

    # -- service -----------------------------------------------------------------------------
    def set_service(self, url: str, *, paused: bool) -> None:
        self.url = url
        if not url:
            self.service.setText("Not serving")
        elif paused:
            self.service.setText(
                f"<span style='color:{STATE_COLOURS['cancelling']}'>❚❚</span> Paused: new "
                "requests are refused"
            )
        else:
            self.service.setText(
                f"<span style='color:{STATE_COLOURS['completed']}'>●</span> Serving"
            )
        parts = urlsplit(url)
        self.address.setText(parts.netloc)
        self.address.setToolTip(f"{url}/v1" if url else "")
        self.address.setVisible(bool(url))
        self.copy_button.setEnabled(bool(url))
        self.pause_button.setEnabled(bool(url))
        if self.pause_button.isChecked() != paused:
            self.pause_button.blockSignals(True)
            self.pause_button.setChecked(paused)
            self.pause_button.blockSignals(False)
        self.pause_button.setText("Resume new work" if paused else "Pause new work")

    def set_paused(self, paused: bool) -> None:
        self.set_service(self.url, paused=paused)

    def copy_url(self) -> None:
        QGuiApplication.clipboard().setText(f"{self.url}/v1")
        self.copy_button.setText("Copied")
        # With the button as context: the timer dies with it (a window closed meanwhile).
        QTimer.singleShot(1500, self.copy_button, lambda: self.copy_button.setText("Copy URL"))

    # -- counts ------------------------------------------------------------------------------
    def set_counts(self, counts: dict[str, int]) -> None:
        lines = [
            f"<span style='color:{STATE_COLOURS[s]}'>●</span> {counts[s]:,} {s}"
            for s in ORDER
            if counts.get(s)
        ]
        self.counts.setText("<br>".join(lines) if lines else "No tasks yet")

    # -- loaded models -----------------------------------------------------------------------
    def set_loaded(self, models: list[tuple[str, int | None, str]]) -> None:
        """Models in memory: (name, file size, state text such as "unloads in 4 min")."""
        self._loaded = models
        if not models:
            self.loaded.setText("None (a model loads with its first task)")
        else:
            # One line each for the name (elided, never broken at its hyphens), the size and
            # the state: "unloads in 10 min" does not fit beside the size.
            self.loaded.setText(
                "<br>".join(
                    f"<span style='white-space:nowrap'>{html.escape(_elided(self.loaded, name))}"
                    "</span>"
                    f"<br>{human_size(size)} in memory<br>{html.escape(state)}"
                    for name, size, state in models
                )
            )
            self.loaded.setToolTip("\n".join(name for name, _, _ in models))
        memory = resident_memory()  # the window and service; each model's engine is above
        self.memory.setText(f"App memory: {human_size(memory)}" if memory else "")
        self.memory.setVisible(memory is not None)

    # -- recent ------------------------------------------------------------------------------
    def on_changes(self, changes: dict[str, TaskChange]) -> None:
        """Tasks that reached an end state since the last flush go on top of Recent."""
        now = time.time()
        ended = [c for c in changes.values() if c.state in TERMINAL]
        if not ended:
            return
        for change in ended:
            known = [f for f in self._finished if f.task_id == change.task_id]
            for old in known:
                self._finished.remove(old)
            self._finished.appendleft(Finished(change.task_id, change.state, change.model, now))
        self._show_recent()

    def seed_recent(self, rows: list[TaskRow]) -> None:
        """At load: the latest tasks that ended before the window opened."""
        ended = sorted(
            (r for r in rows if r.finished_at is not None and r.state in TERMINAL),
            key=lambda r: r.finished_at or 0.0,
        )
        known = {f.task_id for f in self._finished}
        for row in ended[-RECENT:]:
            if row.id not in known:
                self._finished.appendleft(
                    Finished(row.id, row.state, row.model, row.finished_at or 0.0, why_ended(row))
                )
        self._show_recent()

    def explain_recent(self) -> None:
        """Entries whose reason became known (their rows were just read) say it."""
        if any(not f.why and self.describe(f.task_id) for f in self._finished):
            self._show_recent()

    def _show_recent(self) -> None:
        self.recent.clear()
        now = time.time()
        for done in self._finished:
            done.why = done.why or self.describe(done.task_id)
            text = f"{short_id(done.task_id)}\n{ended_line(done.state, now - done.at)}"
            item = QListWidgetItem(state_icon(done.state), text)
            why = f" — {done.why}" if done.why else ""  # the line has no room for it
            item.setToolTip(
                f"{done.task_id} ({done.model}): {ended_line(done.state, now - done.at)}{why}. "
                "Click to show it."
            )
            item.setData(TASK_ID, done.task_id)
            self.recent.addItem(item)
        self.recent.setFixedHeight(
            max(0, self.recent.sizeHintForRow(0)) * self.recent.count() + 4 if self._finished else 0
        )
        self.recent.setVisible(bool(self._finished))
        self.recent_empty.setVisible(not self._finished)

    def recent_texts(self) -> list[str]:
        return [self.recent.item(i).text() for i in range(self.recent.count())]

    def _tick(self) -> None:
        if self._finished:
            self._show_recent()

    def set_active(self, active: bool) -> None:
        """Hidden: the clock stops (nobody reads "12 s ago")."""
        if active:
            self._clock.start()
            self._tick()
        else:
            self._clock.stop()


def _elided(label: QLabel, text: str) -> str:
    """`text` elided to the sidebar's width (plain: a bold model name rarely fits)."""
    return label.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, WIDTH - 4)
