"""The tasks table's view and column fitting: keyboard focus, the Id cut for room, and the
fitter that keeps widths steady through a run and gives the Id and On restart's title the
room left once the Model's name is whole."""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

from PySide6.QtCore import QModelIndex, QRect, Qt
from PySide6.QtGui import (
    QFocusEvent,
    QFontMetrics,
    QFontMetricsF,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
)
from PySide6.QtWidgets import (
    QApplication,
    QHeaderView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
)

from lmsp_desktop.core.states import TERMINAL, RestartPolicy, TaskState
from lmsp_desktop.gui.format import short_id, state_word
from lmsp_desktop.gui.models.task_table import (
    COL_DURATION,
    COL_ID,
    COL_MODEL,
    COL_ON_RESTART,
    COL_STATE,
    COL_TOKENS,
    COL_TPS,
    HEADERS,
    TaskTableModel,
)
from lmsp_desktop.gui.models.task_table import Role as TaskRole
from lmsp_desktop.gui.pages.column_fit import ColumnFitter, Index

FOCUS_PEN = 2  # px: the outline of the focused table's current row


def cut_id(task_id: str, room: int, metrics: QFontMetrics | QFontMetricsF) -> str:
    """The id whole when it fits `room` px, else its prefix and as much of its end as fits
    ("resp_…6ced68f35f77"): the random end tells tasks apart, the start (their creation
    time) is alike for tasks made together; with no room even for that, its end alone.
    With QFontMetricsF a text fits as Qt's cell paints it (its exact width within the room;
    the rounded width let through an id a pixel too wide, which Qt then cut itself:
    "…p_01a23ee954…")."""

    def fits(text: str) -> bool:
        return math.ceil(metrics.horizontalAdvance(text)) <= room

    if fits(task_id):
        return task_id
    cut = min((i for i in (task_id.find("_"), task_id.find("-")) if i >= 0), default=-1)
    prefix, rest = task_id[: cut + 1], task_id[cut + 1 :]
    kept = _longest_end(rest, lambda end: fits(f"{prefix}…{end}"))
    if kept >= 4:  # "…" and at least four of its last characters
        return f"{prefix}…{rest[-kept:]}"
    kept = _longest_end(task_id, lambda end: fits(f"…{end}"))
    return f"…{task_id[-kept:]}" if kept else "…"


def _longest_end(text: str, fits: Any) -> int:
    """How many of `text`'s last characters `fits` takes (0 to len - 1): the widths grow
    with each character, so halving finds it in a few measures."""
    low, high = 0, len(text) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits(text[-middle:]):
            low = middle
        else:
            high = middle - 1
    return low


class IdCut(QStyledItemDelegate):
    """The Id cell: the whole id when its column has room (the fitter gives it room once the
    Model's name is whole), else cut to its prefix and its end (`cut_id`), never cut in the
    middle of its short form as Qt's own elision did ("dl_......4cb8"). Whole on hover."""

    _room = 0  # the width of the cell being painted (0: measuring, never cut)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        self._room = option.rect.width()
        try:
            super().paint(painter, option, index)
        finally:
            self._room = 0

    def initStyleOption(self, option: QStyleOptionViewItem, index: Any) -> None:
        super().initStyleOption(option, index)
        option.textElideMode = Qt.TextElideMode.ElideLeft
        if self._room > 0:
            # The room Qt's style lays the text in: its text rectangle, less the text margins
            # it keeps on both sides (QCommonStyle's viewItemDrawText), measured exactly.
            widget = option.widget
            style = widget.style() if widget is not None else QApplication.style()
            margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, widget)
            text = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, widget)
            room = min(text.width(), self._room) - 2 * (margin + 1)
            option.text = cut_id(option.text, room, QFontMetricsF(option.font))


class SteadyFitter(ColumnFitter):
    """The task table's fitter: widths hold while a row's text moves within its run.

    A running download rewrites its Duration ("15.0 s left" → "9.5 s left") and Output
    ("768.0 KiB / 1.5 MiB" → "1.0 MiB / 1.5 MiB") every second: refitting on each narrower
    text made the columns, and the Model column that takes what is left, jump (268 → 281 →
    226 px in one download). So a column only grows within a run, and narrows again once
    the row ends, or when rows come or go (measured as the fitter does for any table).

    A cell that grows within a run (a download's time left going from "9.5 s left" to
    "30 min 29 s left" as the hub slows) does not take its room from the Model column
    either, where it cut the model's name shorter and shorter (walkH19): the Model column
    keeps its width (less only what its name does not need), the growth is taken from the
    columns whose cells are cut whole-on-hover (Output first, then Client and Id: the
    narrowing steps of the drop order), and when none has any left, the table scrolls. No
    column is dropped or brought back within a run either. Any other cause of a fit (the
    window resized, rows coming or going, a row ending, the user's menu) fits freely."""

    _changing: range | None = None  # the rows of the data change being measured
    _hold = False  # the fit due follows only changes of rows that have not ended
    _held = False  # the Model column fixed at its width while the table scrolls
    _id_short = 0  # the widest Id cell in its short form ("resp_…8f2a91c0"), px
    _reserved: dict[int, int]  # the RESERVED columns' widths, px

    # Room the Id and On restart's title get only once the Model's name is whole (walk20: at
    # 1600 px the Id read "resp_…b987db1d" beside 670 px of blank Model): the Id is fitted
    # at its short form and widened to whole with what is left; On restart fitted at its
    # cells ("—", or a policy: as wide as the widest policy, so a run that begins or ends
    # never moves it) and its title "↻", and given its whole title when there is room. Titles
    # are measured without room for the sort arrow, but on the sorted column (the arrow sits
    # on one column only; every title kept 20 px for it).
    RESTART_WORDS = tuple(p.value for p in RestartPolicy)
    # Columns as wide as their widest form from the first row, so that a run's start and end
    # move nothing (walk21: State, Duration and Speed grew ~22 px into the Model as the first
    # run went from loading to running, and "cancellin…" was cut while a task cancelled):
    # every state's word, a speed up to 999.9 tok/s (or KiB/s), a run up to 9 min 59 s; and
    # a download's bytes so far up to 999.9 of a unit ("0 B / 3.0 MiB" → "256.0 KiB / …").
    RESERVED: ClassVar[dict[int, tuple[str, ...]]] = {
        COL_STATE: (*(state_word(s) for s in TaskState), "queued #00"),
        COL_TPS: ("000.0 tok/s", "000.0 KiB/s"),
        COL_DURATION: ("0 min 00 s", "00.0 s"),
    }
    BYTES_SO_FAR = re.compile(r"[\d.]+ \w*B / ")

    def __init__(self, table: QTableView, *args: Any, **kwargs: Any) -> None:
        super().__init__(table, *args, **kwargs)
        table.horizontalHeader().sortIndicatorChanged.connect(self.fit_soon)

    def _remeasure(self, *_: object) -> None:
        self._id_short = 0
        self._reserved = {}
        super()._remeasure()

    def _cell_width(self, index: QModelIndex) -> int:
        width = super()._cell_width(index)
        forms = self._forms(index)
        if forms and width > 0:
            # A cell's width beyond its text's (margins, the state's badge) is alike for all
            # the column's cells: the widest form with it. Text widths measured exactly
            # (ceil), as the cell's own hint measures them.
            metrics = QFontMetricsF(self.table.font())
            text = math.ceil(metrics.horizontalAdvance(str(index.data() or "")))
            widest = max(math.ceil(metrics.horizontalAdvance(f)) for f in forms)
            reserved = width - text + widest
            col = index.column()
            self._reserved[col] = max(self._reserved.get(col, 0), reserved)
        if index.column() == COL_ID:  # its short form: prefix, "…" and eight of its end
            # Measured as "resp_…00000000" (digits are the widest of hex here): one width
            # for every id with that prefix, so a new task's id never moves the column.
            prefix = short_id(str(index.data() or "")).partition("…")[0]
            short = self.table.fontMetrics().horizontalAdvance(f"{prefix}…00000000")
            self._id_short = max(self._id_short, short + self._margins())
        return width

    def _margins(self) -> int:
        """A plain cell's width beyond its text's (its margins and the grid), with a pixel or
        two to spare for the rounding of the text's width: a fixed figure."""
        style = self.table.style()
        frame = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, self.table)
        return 2 * (frame + 1) + int(self.table.showGrid()) + 2

    def title_width(self, col: int) -> int:
        header = self.table.horizontalHeader()
        size = header.sectionSizeFromContents(col)
        width = size.width()
        if header.isSortIndicatorShown() and col != header.sortIndicatorSection():
            style = header.style()
            width -= size.height() + style.pixelMetric(QStyle.PixelMetric.PM_HeaderMargin)
        if col == COL_ON_RESTART:  # measured as "↻", whichever title it shows now
            metrics = header.fontMetrics()
            shown = str(self.table.model().headerData(col, Qt.Orientation.Horizontal))
            short = TaskTableModel.SHORT_RESTART_TITLE
            width += metrics.horizontalAdvance(short) - metrics.horizontalAdvance(shown)
        return width

    def whole_restart_title(self) -> int:
        """What On restart's whole title needs."""
        metrics = self.table.horizontalHeader().fontMetrics()
        grow = metrics.horizontalAdvance(HEADERS[COL_ON_RESTART])
        grow -= metrics.horizontalAdvance(TaskTableModel.SHORT_RESTART_TITLE)
        return self.title_width(COL_ON_RESTART) + grow

    def whole_id(self) -> int:
        """What the longest whole id needs."""
        return max(self._content.get(COL_ID, 0), self.title_width(COL_ID))

    def _measure_again(self) -> None:
        # Reserved again from the cells there now: a download ended, its bytes' room goes.
        for col in self._shrunk:
            self._reserved.pop(col, None)
        super()._measure_again()

    def _forms(self, index: QModelIndex) -> tuple[str, ...]:
        """The widest forms the cell's text may take within its run."""
        if index.column() == COL_TOKENS:
            text = str(index.data() or "")
            found = self.BYTES_SO_FAR.match(text)
            return (f"000.0 KiB / {text[found.end() :]}",) if found else ()
        return self.RESERVED.get(index.column(), ())

    def content_width(self, col: int) -> int:
        if col == COL_ID and self._id_short:
            return max(min(self._content.get(COL_ID, 0), self._id_short), self.title_width(col))
        width = max(super().content_width(col), self._reserved.get(col, 0))
        if col == COL_ON_RESTART:  # as wide as the widest policy: "—" to "resume" moves nothing
            metrics = self.table.fontMetrics()
            words = max(metrics.horizontalAdvance(w) for w in self.RESTART_WORDS)
            width = max(width, words + self._margins())
        return width

    def _widen(self, needed: dict[int, int], hidden: set[int], room: int) -> None:
        """The room left once the Model's name is whole: On restart's whole title, then the
        whole Id (not for a width the user dragged)."""
        header = self.table.horizontalHeader()
        shown = [c for c in range(header.count()) if c not in hidden]
        spare = room - sum(needed[c] for c in shown if c not in self.stretch)
        spare -= sum(self.content_width(c) for c in shown if c in self.stretch)
        title = self.whole_restart_title()
        restart = COL_ON_RESTART in shown and COL_ON_RESTART not in self.dragged
        if restart and 0 < title - needed[COL_ON_RESTART] <= spare:
            spare -= title - needed[COL_ON_RESTART]
            needed[COL_ON_RESTART] = title
        # Whole or not at all: an Id a few pixels short of whole showed a long cut end
        # ("resp_…a23ef0…"), and beside whole ones a row cut by Qt itself.
        more = self.whole_id() - needed.get(COL_ID, 0)
        if COL_ID in shown and COL_ID not in self.dragged and 0 < more <= spare:
            needed[COL_ID] += more

    def steps(self) -> list[int | tuple[int, int]]:
        """Within a run (`fit_within_run`), the whole title and the whole Id give way first."""
        first: list[int | tuple[int, int]] = [
            (c, self.content_width(c)) for c in (COL_ON_RESTART, COL_ID) if c not in self.dragged
        ]
        return [*first, *super().steps()]

    def _title_follows(self) -> None:
        """On restart's title: whole where its column has room for it, else "↻"."""
        header = self.table.horizontalHeader()
        short = header.sectionSize(COL_ON_RESTART) < self.whole_restart_title()
        model = self.table.model()
        if isinstance(model, TaskTableModel):
            model.set_short_restart_title(short)

    def _data_changed(self, top: Index, bottom: Index, roles: Any = ()) -> None:
        before = set(self._shrunk)
        rows = self._changing = range(top.row(), bottom.row() + 1)
        try:
            super()._data_changed(top, bottom, roles)
        finally:
            self._changing = None
        if self._shrunk != before and any(self._running(r) for r in rows):
            self._shrunk = before  # narrower within a run: the width it had stays

    def _running(self, row: int) -> bool:
        return self.table.model().index(row, 0).data(TaskRole.STATE) not in TERMINAL

    def fit_soon(self, *_: object) -> None:
        # Asked at most once per change that grew a column (rare): the rows are read then.
        rows = self._changing
        in_run = rows is not None and all(self._running(r) for r in rows)
        if not self._timer.isActive():
            self._hold = in_run
        elif not in_run:
            self._hold = False  # another cause came too: a free fit
        super().fit_soon()

    def _fit_due(self) -> None:
        hold, self._hold = self._hold, False
        if hold:
            self.fit_within_run()
        else:
            self.fit()

    def fit(self) -> None:
        if self._held:  # stretched again, as the free fit expects
            self._held = False
            self.table.horizontalHeader().setSectionResizeMode(
                COL_MODEL, QHeaderView.ResizeMode.Stretch
            )
        super().fit()
        self._title_follows()

    def fit_within_run(self) -> None:
        """Fit a running row's grown cells without narrowing the Model column's name."""
        header = self.table.horizontalHeader()
        if list(self.stretch) != [COL_MODEL] or header.isSectionHidden(COL_MODEL):
            self.fit()
            return
        if self._shrunk:
            self._measure_again()
        hidden = set(self.hidden_columns())
        fixed = [c for c in range(header.count()) if c not in hidden and c != COL_MODEL]
        needed = {c: self.dragged.get(c, self.content_width(c)) for c in fixed}
        for col in (COL_ID, COL_ON_RESTART):  # widened for room: kept, or cut first
            if col in needed and col not in self.dragged:
                needed[col] = max(needed[col], header.sectionSize(col))
        # Less than it has only where its widest name is whole in less.
        keep = min(header.sectionSize(COL_MODEL), self.content_width(COL_MODEL))
        excess = sum(needed.values()) + keep - self.table.viewport().width()
        for step in self.steps():
            if excess <= 0:
                break
            if isinstance(step, tuple) and step[0] in needed:
                col, least = step
                cut = max(min(least, needed[col]), needed[col] - excess)
                excess -= needed[col] - cut
                needed[col] = cut
        self._fitting = True
        try:
            # The narrowed first: the Model column is never squeezed on the way.
            for col in sorted(needed, key=lambda c: needed[c] - header.sectionSize(c)):
                if header.sectionSize(col) != needed[col]:
                    header.resizeSection(col, needed[col])
            if excess > 0:  # nothing left to cut: the table scrolls, Model as it was
                if not self._held:
                    self._held = True
                    header.setSectionResizeMode(COL_MODEL, QHeaderView.ResizeMode.Fixed)
                header.resizeSection(COL_MODEL, keep)
            elif self._held:  # it fits again: Model takes what is left (no less than keep)
                self._held = False
                header.setSectionResizeMode(COL_MODEL, QHeaderView.ResizeMode.Stretch)
        finally:
            self._fitting = False
        self._title_follows()


class TaskTableView(QTableView):
    """The tasks table as a keyboard user meets it: Tab leaves it for the next control (Qt's
    default walked cell by cell and, at a row's end, moved the selection to the next task, so
    the details pane switched and nothing after the table was reachable); the arrows move
    within it; and while it has the focus its current row is outlined (selected or not), so
    one sees where the keys act (no mark showed at all)."""

    def __init__(self) -> None:
        super().__init__()
        self.setTabKeyNavigation(False)

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        current = self.currentIndex()
        if not self.hasFocus() or not current.isValid():
            return
        rect = self.row_rect(current.row())
        if rect.isEmpty():
            return
        # On a selected row the outline is in the selection's text colour, on another in the
        # selection's colour: each stands out from the row under it. A darker Highlight
        # was faint on a selected row (walk21 s11z: 1.8:1).
        selected = self.selectionModel().isRowSelected(current.row(), current.parent())
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Highlight
        painter = QPainter(self.viewport())
        pen = QPen(self.palette().color(role))
        pen.setWidth(FOCUS_PEN)
        pen.setStyle(Qt.PenStyle.DashLine)
        painter.setPen(pen)
        painter.drawRect(rect.adjusted(1, 1, -FOCUS_PEN, -FOCUS_PEN))
        painter.end()

    def row_rect(self, row: int) -> QRect:
        """The row's visible cells, from its first shown column to its last."""
        header = self.horizontalHeader()
        shown = [c for c in range(header.count()) if not header.isSectionHidden(c)]
        if not shown:
            return QRect()
        first = min(shown, key=header.visualIndex)
        last = max(shown, key=header.visualIndex)
        model = self.model()
        return self.visualRect(model.index(row, first)).united(
            self.visualRect(model.index(row, last))
        )

    def currentChanged(self, current: Index, previous: Index) -> None:
        super().currentChanged(current, previous)
        # The outline spans the row: repaint the rows it leaves and reaches whole.
        for index in (previous, current):
            if index.isValid():
                self.viewport().update(self.row_rect(index.row()))

    def focusInEvent(self, event: QFocusEvent) -> None:
        super().focusInEvent(event)
        self.viewport().update()

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self.viewport().update()
