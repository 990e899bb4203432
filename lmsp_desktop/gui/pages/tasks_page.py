"""The Tasks page: filter chips and search, the live tasks table, details below, Cancel."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import (
    QItemSelectionModel,
    QModelIndex,
    QPoint,
    QRect,
    QSettings,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QFocusEvent,
    QFontMetrics,
    QGuiApplication,
    QKeySequence,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QShortcut,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QButtonGroup,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import CANCELLABLE, TERMINAL, RestartPolicy
from lmsp_desktop.core.views import TaskChange, TaskFilter
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.data import STATE_FILTERS
from lmsp_desktop.gui.format import short_id
from lmsp_desktop.gui.models.task_table import (
    COL_CLIENT,
    COL_CREATED,
    COL_DURATION,
    COL_ID,
    COL_MODEL,
    COL_ON_RESTART,
    COL_TOKENS,
    COL_TPS,
    DOWN_ARROW,
    HEADERS,
    TaskTableModel,
)
from lmsp_desktop.gui.models.task_table import Role as TaskRole
from lmsp_desktop.gui.pages.column_fit import ColumnFitter, ElideMiddle, Index, column_menu
from lmsp_desktop.gui.pages.progress_delegate import ProgressBarDelegate
from lmsp_desktop.gui.pages.task_details import TaskDetails

FOCUS_PEN = 2  # px: the outline of the focused table's current row


def curl_example(url: str, model: str = "smollm2-135m-instruct") -> str:
    """A command that works as pasted into a POSIX shell with LMSP_TOKEN set: the header is
    in double quotes so that the shell expands the token."""
    return (
        f'curl -s {url}/v1/responses -H "Authorization: Bearer $LMSP_TOKEN" '
        "-H 'Content-Type: application/json' "
        f'-d \'{{"model": "{model}", "input": "Write a haiku about tea", '
        '"background": true}\''
    )


def cut_id(task_id: str, room: int, metrics: QFontMetrics) -> str:
    """The id whole when it fits `room` px, else its prefix and as much of its end as fits
    ("resp_…6ced68f35f77"): the random end tells tasks apart, the start (their creation
    time) is alike for tasks made together; with no room even for that, its end alone."""
    if metrics.horizontalAdvance(task_id) <= room:
        return task_id
    cut = min((i for i in (task_id.find("_"), task_id.find("-")) if i >= 0), default=-1)
    prefix, rest = task_id[: cut + 1], task_id[cut + 1 :]
    left = room - metrics.horizontalAdvance(prefix)
    tail = metrics.elidedText(rest, Qt.TextElideMode.ElideLeft, left) if left > 0 else ""
    if len(tail) >= 5:  # "…" and at least four of its last characters
        return prefix + tail
    return metrics.elidedText(task_id, Qt.TextElideMode.ElideLeft, room)


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
            widget = option.widget
            style = widget.style() if widget is not None else QApplication.style()
            margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, widget)
            option.text = cut_id(option.text, self._room - 2 * (margin + 1), option.fontMetrics)


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

    # Room the Id and On restart's title get only once the Model's name is whole (walk20: at
    # 1600 px the Id read "resp_…b987db1d" beside 670 px of blank Model): the Id is fitted
    # at its short form and widened to whole with what is left; On restart fitted at its
    # cells ("—", or a policy: as wide as the widest policy, so a run that begins or ends
    # never moves it) and its title "↻", and given its whole title when there is room. Titles
    # are measured without room for the sort arrow, but on the sorted column (the arrow sits
    # on one column only; every title kept 20 px for it).
    RESTART_WORDS = tuple(p.value for p in RestartPolicy)

    def __init__(self, table: QTableView, *args: Any, **kwargs: Any) -> None:
        super().__init__(table, *args, **kwargs)
        table.horizontalHeader().sortIndicatorChanged.connect(self.fit_soon)

    def _remeasure(self, *_: object) -> None:
        self._id_short = 0
        super()._remeasure()

    def _cell_width(self, index: QModelIndex) -> int:
        width = super()._cell_width(index)
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

    def content_width(self, col: int) -> int:
        if col == COL_ID and self._id_short:
            return max(min(self._content.get(COL_ID, 0), self._id_short), self.title_width(col))
        width = super().content_width(col)
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
        if COL_ID in shown and COL_ID not in self.dragged and spare > 0:
            more = min(spare, max(0, self.whole_id() - needed[COL_ID]))
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
        painter = QPainter(self.viewport())
        pen = QPen(self.palette().color(QPalette.ColorRole.Highlight).darker(140))
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


class TasksPage(QWidget):
    """Lists tasks live, filters them in the store, and cancels the selection."""

    try_prompt_requested = Signal()
    pair_requested = Signal()
    connect_requested = Signal()

    def __init__(
        self,
        core: CoreApi,
        url: str = "",
        parent: QWidget | None = None,
        qsettings: QSettings | None = None,
    ) -> None:
        super().__init__(parent)
        self.core = core
        self.qsettings = qsettings  # where the columns the user showed or hid are kept
        self.url = url
        self.model = TaskTableModel(core, parent=self)
        self._wanted: str | None = None  # a task asked for whose row has not arrived yet
        self._kept: tuple[list[str], str | None] = ([], None)  # selection across a reload
        self.confirm_box: QMessageBox | None = None

        self.chips = QButtonGroup(self)
        chip_row = QHBoxLayout()
        chip_row.setSpacing(4)
        for i, name in enumerate(STATE_FILTERS):
            chip = QPushButton(name)
            chip.setCheckable(True)
            chip.setChecked(i == 0)
            chip.setProperty("chip", True)
            # Compact, as wide as their word: the row fits a 900 px window with the search.
            chip.setFixedWidth(chip.fontMetrics().horizontalAdvance(name) + 18)
            self.chips.addButton(chip, i)
            chip_row.addWidget(chip)
        self.chips.idClicked.connect(lambda _: self._filter_later(0))
        self.search = QLineEdit(placeholderText="Filter by id, model or client  (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.setMinimumWidth(120)  # never squeezed to "Fi…"
        self.search.textChanged.connect(lambda _: self._filter_later(250))
        self._filter_timer = QTimer(self, singleShot=True)
        self._filter_timer.timeout.connect(self._apply_filter)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Cancel the selected tasks (Delete)")
        self.cancel_button.clicked.connect(lambda: self.cancel_tasks(self.selected_ids()))
        self.try_button = QPushButton("Try a prompt…")
        self.try_button.clicked.connect(self.try_prompt_requested)
        chip_row.addSpacing(6)
        chip_row.addWidget(self.search, 1)
        chip_row.addWidget(self.cancel_button)
        chip_row.addWidget(self.try_button)

        self.table = TaskTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 10)
        self.table.setWordWrap(False)
        self.table.setItemDelegateForColumn(
            COL_TOKENS, ProgressBarDelegate(TaskRole.PROGRESS, self.table)
        )
        header = self.table.horizontalHeader()
        # Newest first is submission order, the Id's (ids sort as submitted): the arrow sits
        # on Id, a column a narrow window keeps, where Created steps aside early
        # (▼: newest first; Qt calls that arrow AscendingOrder, see TaskTableModel.sort).
        header.setSortIndicator(COL_ID, DOWN_ARROW)
        # Columns fit their content and Model takes what is left. Long cells give way first,
        # cut (whole on hover): a long model (in its middle, its tag kept), a client named
        # "lmsp-desktop models pull", a download's "1.0 MiB / 3.0 MiB, waiting for the hub
        # until 18:58:57" (at 1200 px these pushed On restart and Created out and cut the Id to
        # "dl_......4cb8"). Then the least useful go: On restart and Created (both in the
        # details header), the long cells further, and only then Duration (a download's time
        # left) and the speed. The Id is never cut below its short form (`dl_…8f2a91c0`).
        header.setMinimumSectionSize(40)
        letters = self.fontMetrics().averageCharWidth()
        self.table.setItemDelegateForColumn(COL_ID, IdCut(self.table))
        # A model cut in its middle keeps its tag: "lmsp-test/SmolLM2-135…Instruct-GGUF:Q8_0",
        # not three rows alike of "lmsp-test/SmolLM2-135M-Instru…".
        self.table.setItemDelegateForColumn(COL_MODEL, ElideMiddle(self.table))
        # The narrowest Id: its distinguishing end, "…8f2a91c0" (margins and grid included).
        id_end = self.fontMetrics().horizontalAdvance("…00000000") + 10
        self.fitter = SteadyFitter(
            self.table,
            stretch={COL_MODEL: (letters * 12, letters * 32)},
            drop_order=[
                (COL_TOKENS, letters * 24),
                (COL_CLIENT, letters * 18),
                COL_ON_RESTART,
                COL_CREATED,
                (COL_CLIENT, letters * 8),
                (COL_TOKENS, letters * 14),
                (COL_ID, id_end),
                COL_DURATION,
                COL_TPS,
            ],
            draggable=True,
        )
        # Widths dragged on the header are kept in the window's settings, as the columns shown
        # or hidden are (as on the Models page); written to disk once the drag rests (a drag
        # resizes at every mouse move).
        self._sync_soon = QTimer(self, singleShot=True, interval=300)
        self._sync_soon.timeout.connect(self._sync_settings)
        self.fitter.dragged_changed.connect(self._keep_widths)
        # Right-click on the header: show or hide columns, as on the Models page (the same
        # menu, column_fit.column_menu), kept in the window's settings.
        header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self.open_column_menu)
        self.column_menu: QMenu | None = None
        self._restore_columns()
        self.table.setSortingEnabled(True)
        self.table.selectionModel().selectionChanged.connect(self._selection_changed)
        self.table.selectionModel().currentRowChanged.connect(self._selection_changed)
        self.details = TaskDetails(core)
        self.details.cancel_requested.connect(self.cancel_tasks)
        self.details.retried.connect(self.show_task)  # the new download, selected
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.details)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)

        self.empty = self._empty_state()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.splitter)
        self.stack.addWidget(self.empty)
        layout = QVBoxLayout(self)
        layout.addLayout(chip_row)
        layout.addWidget(self.stack)

        QShortcut(QKeySequence.StandardKey.Find, self, self._focus_search)
        delete = QShortcut(QKeySequence.StandardKey.Delete, self.table, self.confirm_cancel)
        delete.setContext(Qt.ShortcutContext.WidgetShortcut)
        copy = QShortcut(QKeySequence.StandardKey.Copy, self.table, self._copy_ids)
        copy.setContext(Qt.ShortcutContext.WidgetShortcut)
        # Escape in the filter box clears it (and lists every task again at once).
        clear = QShortcut(QKeySequence(Qt.Key.Key_Escape), self.search, self._clear_search)
        clear.setContext(Qt.ShortcutContext.WidgetShortcut)
        self.model.modelAboutToBeReset.connect(self._remember_selection)
        self.model.modelReset.connect(self._restore_selection)
        self.model.modelReset.connect(self._show_empty_state)
        self.model.rowsInserted.connect(self._show_empty_state)
        self.model.dataChanged.connect(lambda *_: self._update_actions())
        self.model.rowsInserted.connect(self._select_wanted)
        self._clock = QTimer(self, interval=1000)
        self._clock.timeout.connect(self.model.tick)
        self._clock.timeout.connect(self.details.tick)
        self._clock.start()
        self._update_actions()

    def _empty_state(self) -> QWidget:
        box = QWidget()
        self.empty_label = QLabel()
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        self.empty_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons = QHBoxLayout()
        buttons.addStretch()
        for text, slot in (
            ("Try a prompt…", self.try_prompt_requested.emit),
            ("Connect a client…", self.connect_requested.emit),
            ("Copy a curl example", self.copy_curl),
            ("Pair a client…", self.pair_requested.emit),
        ):
            button = QPushButton(text)
            button.clicked.connect(slot)
            buttons.addWidget(button)
            if slot == self.copy_curl:
                self.curl_button = button
        buttons.addStretch()
        layout = QVBoxLayout(box)
        layout.addStretch()
        layout.addWidget(self.empty_label)
        layout.addLayout(buttons)
        layout.addStretch()
        return box

    def set_url(self, url: str) -> None:
        self.url = url
        self.empty_label.setText(
            f"<h3>No tasks yet.</h3>Clients send work to <b>{url or '…'}/v1</b> with a "
            "token. <b>Connect a client…</b> makes one here (shown once, with snippets to "
            "paste); <b>Pair a client…</b> gives another app or device a one-time code. "
            "The curl example reads the token from LMSP_TOKEN: "
            "<code>export LMSP_TOKEN=lmsp_…</code> first."
        )

    # -- loading and live updates ------------------------------------------------------------
    async def load(self) -> None:
        self.set_url(self.url)
        await self.model.reload()

    async def reload(self) -> None:
        """Re-read the table and the shown task (after a long time hidden)."""
        await self.model.reload()
        await self.details.refresh()

    def set_active(self, active: bool) -> None:
        """The durations' clock runs only while the window is shown."""
        if active:
            self.model.tick()
            self._clock.start()
        else:
            self._clock.stop()

    def on_changes(self, changes: dict[str, TaskChange]) -> None:
        aio.spawn(self.model.apply_changes(changes), self)
        self.details.on_changes(changes)

    def _show_empty_state(self, *_: Any) -> None:
        flt = self.model.filter
        empty = self.model.rowCount() == 0 and not flt.states and not flt.text
        self.stack.setCurrentWidget(self.empty if empty else self.splitter)

    def _filter_later(self, ms: int) -> None:
        self._filter_timer.start(ms)

    def _apply_filter(self) -> None:
        name = list(STATE_FILTERS)[max(0, self.chips.checkedId())]
        flt = TaskFilter(states=STATE_FILTERS[name], text=self.search.text().strip())
        aio.spawn(self.model.set_filter(flt), self)

    def _clear_search(self) -> None:
        if self.search.text():
            self.search.clear()
            self._filter_timer.stop()
            self._apply_filter()

    def _focus_search(self) -> None:
        self.search.setFocus()
        self.search.selectAll()

    def show_task(self, task_id: str) -> None:
        """Select a task by id, and only it (Show in Tasks, a prompt just sent)."""
        row = self.model.row_of(task_id)
        self._wanted = None
        if row is not None:
            self.table.selectRow(row)  # replaces the selection: the pane follows it
            self.table.scrollTo(self.model.index(row, 0))
        else:  # not loaded (yet): select nothing else, show it now, select its row on arrival
            self._wanted = task_id
            self.table.clearSelection()
            self.details.display(task_id)

    def _select_wanted(self, *_: Any) -> None:
        if self._wanted is not None and self.model.row_of(self._wanted) is not None:
            self.show_task(self._wanted)

    # -- selection and cancel ----------------------------------------------------------------
    def selected_ids(self) -> list[str]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [self.model.task_id(r) for r in rows]

    def _selection_changed(self, *_: Any) -> None:
        """The pane shows a highlighted row: the current one if highlighted, else the first;
        nothing when nothing is highlighted (unless a task we just asked for is arriving)."""
        ids = self.selected_ids()
        current = self.table.currentIndex()
        if current.isValid() and self.model.task_id(current.row()) in ids:
            shown: str | None = self.model.task_id(current.row())
        else:
            shown = ids[0] if ids else None
        if shown is None and self._wanted is not None:
            shown = self._wanted
        elif shown is not None:
            self._wanted = None
        self.details.display(shown)
        self._update_actions()

    def _remember_selection(self) -> None:
        self._kept = (self.selected_ids(), self.details.task_id)

    def _restore_selection(self) -> None:
        """After a reload (filter, sort) keep what is still listed highlighted; a task the
        filter hides leaves the pane."""
        ids, shown = self._kept
        rows = [r for r in (self.model.row_of(i) for i in ids) if r is not None]
        selection = self.table.selectionModel()
        flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
        for row in rows:
            selection.select(self.model.index(row, 0), flags)
        shown_row = self.model.row_of(shown) if shown else None
        if shown_row is not None:
            selection.setCurrentIndex(
                self.model.index(shown_row, 0), QItemSelectionModel.SelectionFlag.NoUpdate
            )
        self._selection_changed()

    def _update_actions(self) -> None:
        self.cancel_button.setEnabled(bool(self.cancellable_selection()))

    def cancellable_selection(self) -> list[str]:
        return [
            i
            for i in self.selected_ids()
            if (t := self.model.task(i)) is not None and t.state in CANCELLABLE
        ]

    def confirm_cancel(self) -> None:
        """Delete key: ask first (without blocking the loop), then cancel the selection."""
        ids = self.cancellable_selection()
        if not ids:
            return
        box = QMessageBox(
            QMessageBox.Icon.Question,
            "Cancel tasks",
            f"Cancel {len(ids)} task{'s' if len(ids) > 1 else ''}? "
            "Running tasks stop after their current token; their output so far is kept.",
            parent=self,
        )
        box.addButton("Cancel tasks", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Keep them", QMessageBox.ButtonRole.RejectRole)
        box.accepted.connect(lambda: self.cancel_tasks(ids))
        self.confirm_box = box
        box.open()

    @asyncSlot(list)  # type: ignore[untyped-decorator]
    async def cancel_tasks(self, ids: list[str]) -> None:
        """The same transition as POST /v1/responses/{id}/cancel, for each task."""
        ids = [i for i in ids if i]
        if not ids:
            return
        self.cancel_button.setEnabled(False)
        self.details.cancel_button.setEnabled(False)
        try:
            for task_id in ids:
                await self.core.cancel(task_id)
        except LmspError as exc:
            aio.show_error(self, exc)
        finally:
            self._update_actions()

    # -- columns the user shows or hides ------------------------------------------------------
    def open_column_menu(self, pos: QPoint) -> QMenu:
        """The header's menu: each column but the Id, ticked when shown; one left out for
        room says so, and ticking it makes others give way first; Reset columns."""
        menu = column_menu(self, self.fitter, HEADERS, fixed={COL_ID}, changed=self._save_columns)
        self.column_menu = menu
        menu.popup(self.table.horizontalHeader().mapToGlobal(pos))  # never exec() here
        return menu

    def _save_columns(self) -> None:
        if self.qsettings is None:
            return
        # By title, not number: a column added in a later version does not shift them.
        hidden = ",".join(HEADERS[c] for c in sorted(self.fitter.unwanted))
        self.qsettings.setValue("tasks/hidden_columns", hidden)
        asked = ",".join(HEADERS[c] for c in self.fitter.pinned)
        self.qsettings.setValue("tasks/asked_columns", asked)
        self._keep_widths()  # Reset columns forgets the dragged ones
        self.qsettings.sync()  # a user's click, now and then: kept even if the app is killed

    def _keep_widths(self) -> None:
        if self.qsettings is None:
            return
        widths = sorted(self.fitter.dragged.items())
        self.qsettings.setValue(
            "tasks/column_widths", ",".join(f"{HEADERS[c]}={px}" for c, px in widths)
        )
        self._sync_soon.start()

    def _sync_settings(self) -> None:
        if self.qsettings is not None:
            self.qsettings.sync()

    def _restore_columns(self) -> None:
        if self.qsettings is None:
            return
        settings = self.qsettings

        def columns(key: str) -> list[int]:
            titles = str(settings.value(key, "") or "").split(",")
            return [HEADERS.index(t) for t in titles if t in HEADERS and t != HEADERS[COL_ID]]

        self.fitter.unwanted = set(columns("tasks/hidden_columns"))
        self.fitter.pinned = [
            c for c in columns("tasks/asked_columns") if c not in self.fitter.unwanted
        ]
        for pair in str(settings.value("tasks/column_widths", "") or "").split(","):
            title, _, px = pair.partition("=")
            if title in HEADERS and px.isdigit() and int(px) > 0:
                self.fitter.dragged[HEADERS.index(title)] = int(px)

    def _copy_ids(self) -> None:
        """Ctrl+C: the selected ids, one a line, said in the status bar as the URL's copy is."""
        ids = self.selected_ids()
        if not ids:
            return
        QGuiApplication.clipboard().setText("\n".join(ids))
        window = self.window()
        if isinstance(window, QMainWindow):
            said = "Id copied ✓" if len(ids) == 1 else f"{len(ids)} ids copied ✓"
            window.statusBar().showMessage(said, 2500)

    def copy_curl(self) -> None:
        QGuiApplication.clipboard().setText(curl_example(self.url))
        self.curl_button.setText("Copied ✓ (export LMSP_TOKEN first)")
        button = self.curl_button  # the timer dies with the button (context object)
        QTimer.singleShot(2500, button, lambda: button.setText("Copy a curl example"))
