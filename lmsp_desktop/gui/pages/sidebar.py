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

from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QPainter,
    QPaintEvent,
    QPalette,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QStyle,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.models.machine import resident_memory
from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.core.views import TaskChange, TaskRow
from lmsp_desktop.gui.format import STATE_COLOURS, human_size, short_id, state_icon, why_ended
from lmsp_desktop.gui.status import ORDER  # the status bar lists the counts in the same order

# The sidebar is as wide as the widest line it can show, at its font (narrow: at 900 px the
# Tasks page needs the rest). It was a fixed 150 px: under a larger desktop font (GTK's
# Adwaita) Recent read "incomplete 3m a…" and "App memory: 212.6" wrapped its "MiB".
WIDEST_SIZE = human_size(1023.9 * 2**20)  # "1023.9 MiB", the widest a size is written
WIDEST_COUNT = 99_999
WIDEST_AGO = 59 * 60  # "59m ago"
WIDEST_ID = "chatcmpl-…00000000"  # short_id of a Chat Completions task, the longer kind
WIDEST_ADDRESS = "255.255.255.255:65535"
WIDEST_NAV = "Clients (99 waiting)"
WIDEST_STATE = "unloads in 999 min"  # a loaded model's state line
NAV_ICON = 16  # the room a navigation row's dot takes
ITEM_PADDING = 12  # a list row's margins around its icon and text
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
        self.follow(self.font())
        self.setContentsMargins(0, 8, 0, 0)

    def follow(self, font: QFont) -> None:
        """Smaller than `font`, the text's, and bold: set again when that font changes (a
        font of its own no longer follows the application's)."""
        smaller = QFont(font)
        if font.pointSizeF() > 0:
            smaller.setPointSizeF(font.pointSizeF() * 0.85)
        else:  # a font sized in pixels has no point size
            smaller.setPixelSize(max(1, round(font.pixelSize() * 0.85)))
        smaller.setBold(True)
        self.setFont(smaller)

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
        self.nav = QListWidget()
        self.nav.addItems(["Tasks", "Models", "Clients"])
        self.nav.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.nav.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.nav.setFrameShape(QFrame.Shape.NoFrame)
        self.text_width = 0  # the room of the glance panel's lines, set by fit()

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
        # The sidebar's own background, from the palette: a style sheet saying so kept the
        # list at the font it started with when the application's font changed.
        self.recent.viewport().setBackgroundRole(QPalette.ColorRole.Window)
        self.recent.itemClicked.connect(lambda item: self.task_clicked.emit(item.data(TASK_ID)))
        self.recent_empty = _wrapping(QLabel("Nothing finished yet"))
        self._finished: deque[Finished] = deque(maxlen=RECENT)
        self._loaded: list[tuple[str, int | None, str]] = []

        # Below the navigation, the glance panel scrolls when it is taller than the window
        # (every state counted, two models loaded, paused): it never holds the window taller
        # than 600 px.
        self.headings = [Heading(name) for name in ("Service", "Tasks", "Loaded models", "Recent")]
        panel = self.panel = QWidget()
        panel_layout = QVBoxLayout(panel)
        panel_layout.setContentsMargins(0, 0, 0, 0)
        panel_layout.setSpacing(2)
        for widget in (
            self.headings[0],
            self.service,
            self.address,
            self.copy_button,
            self.pause_button,
            self.headings[1],
            self.counts,
            self.headings[2],
            self.loaded,
            self.memory,
            self.headings[3],
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
        # The panel scrolling takes a scroll bar's room from its lines: fit() gives it back.
        self.glance.verticalScrollBar().rangeChanged.connect(self.fit)
        self.fit()

    # -- width -------------------------------------------------------------------------------
    def fit(self) -> None:
        """As wide as the widest line each part can show, whole, at the current font (a model
        name alone is elided: any length, its tooltip has it)."""
        font = self.font()
        metrics = QFontMetrics(font)
        for heading in self.headings:
            heading.follow(font)
        heading_width = max(h.fontMetrics().horizontalAdvance(h.text()) for h in self.headings)
        lines = [
            *(f"● {WIDEST_COUNT:,} {state}" for state in ORDER),
            f"{WIDEST_SIZE} in memory",
            WIDEST_STATE,
            f"App memory: {WIDEST_SIZE}",
            WIDEST_ADDRESS,
            self.recent_empty.text(),
        ]
        text = max(heading_width, *(metrics.horizontalAdvance(line) for line in lines))
        buttons = max(
            # A button's padding around its text, plus its longest text.
            b.sizeHint().width()
            - b.fontMetrics().horizontalAdvance(b.text())
            + max(metrics.horizontalAdvance(t) for t in words)
            for b, words in (
                (self.copy_button, ("Copy URL", "Copied")),
                (self.pause_button, ("Pause new work", "Resume new work")),
            )
        )
        nav = (
            metrics.horizontalAdvance(WIDEST_NAV)
            + max(self.nav.iconSize().width(), NAV_ICON)
            + ITEM_PADDING
        )
        recent = (
            max(
                metrics.horizontalAdvance(WIDEST_ID),
                *(metrics.horizontalAdvance(ended_line(s, WIDEST_AGO)) for s in TERMINAL),
            )
            + self.recent.iconSize().width()
            + ITEM_PADDING
        )
        width = max(text + 4, buttons, nav, recent)
        panel_height = (
            self.panel.heightForWidth(width)
            if self.panel.hasHeightForWidth()
            else self.panel.sizeHint().height()
        )
        scroll_bar = (
            self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
            if panel_height > self.glance.height()
            else 0
        )
        rows = metrics.height() + 10  # roomy enough to click
        for i in range(self.nav.count()):
            self.nav.item(i).setSizeHint(QSize(width + scroll_bar - 4, rows))
        self.nav.setFixedHeight(rows * self.nav.count() + 4)
        self.setFixedWidth(width + scroll_bar)
        if self.text_width != width - 4:
            self.text_width = width - 4
            self.set_loaded(self._loaded)  # names elided to the new room
        self._fit_recent()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self.fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if event.size().height() != event.oldSize().height():
            self.fit()  # taller or shorter: the panel may scroll, or no longer

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
                    f"<span style='white-space:nowrap'>{html.escape(self._elided(name))}"
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
        self._fit_recent()
        self.recent.setVisible(bool(self._finished))
        self.recent_empty.setVisible(not self._finished)

    def _fit_recent(self) -> None:
        self.recent.setFixedHeight(
            max(0, self.recent.sizeHintForRow(0)) * self.recent.count() + 4 if self._finished else 0
        )

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

    def _elided(self, text: str) -> str:
        """`text` elided to the sidebar's width (plain: a bold model name rarely fits)."""
        return self.loaded.fontMetrics().elidedText(
            text, Qt.TextElideMode.ElideRight, self.text_width
        )
