"""The Tasks page: filter chips and search, the live tasks table, details below, Cancel."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import (
    QEvent,
    QItemSelectionModel,
    QObject,
    QPoint,
    QSettings,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QGuiApplication,
    QKeySequence,
    QShortcut,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QMessageBox,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)
from qasync import asyncSlot

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import CANCELLABLE
from lmsp_desktop.core.views import TaskChange, TaskFilter
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.data import STATE_FILTERS
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
from lmsp_desktop.gui.pages.column_fit import ElideMiddle, column_menu
from lmsp_desktop.gui.pages.progress_delegate import ProgressBarDelegate
from lmsp_desktop.gui.pages.task_details import TaskDetails
from lmsp_desktop.gui.pages.task_table_view import IdCut, SteadyFitter, TaskTableView


def curl_example(url: str, model: str = "smollm2-135m-instruct") -> str:
    """A command that works as pasted into a POSIX shell with LMSP_TOKEN set: the header is
    in double quotes so that the shell expands the token."""
    return (
        f'curl -s {url}/v1/responses -H "Authorization: Bearer $LMSP_TOKEN" '
        "-H 'Content-Type: application/json' "
        f'-d \'{{"model": "{model}", "input": "Write a haiku about tea", '
        '"background": true}\''
    )


def no_match_text(chip: str, text: str) -> str:
    """What the table says when the filter leaves it empty, and the way back to every task:
    "No task matches 'zzz'", "No failed task matches 'zzz'", "No running tasks"."""
    kind = "" if chip == "All" else f"{chip.lower()} "
    if text:
        said = f"No {kind}task matches '{html.escape(text)}'"
        way_out = "Esc clears the filter"
    else:
        said = f"No {kind}tasks"
        way_out = "Choose All to see every task"
    return f"<h3>{said}</h3>{way_out}"


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
        # left) and the speed. The Id is fitted at its short form (`dl_…8f2a91c0`) and whole
        # with the room left once the Model's name is (SteadyFitter); widths can be dragged.
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
        # A filter that matches nothing says so over the empty table, and how to leave it
        # (the table alone read as if the tasks were gone).
        self.no_match = QLabel(self.table.viewport())
        self.no_match.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.no_match.setWordWrap(True)
        self.no_match.hide()
        self.table.viewport().installEventFilter(self)
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
        # Also from the table, where the focus is after a click on it: the "No task matches"
        # line says Esc clears the filter.
        clear_here = QShortcut(QKeySequence(Qt.Key.Key_Escape), self.table, self._clear_search)
        clear_here.setContext(Qt.ShortcutContext.WidgetShortcut)
        self.model.modelAboutToBeReset.connect(self._remember_selection)
        self.model.modelReset.connect(self._restore_selection)
        self.model.modelReset.connect(self._show_empty_state)
        self.model.rowsInserted.connect(self._show_empty_state)
        self.model.rowsRemoved.connect(self._show_empty_state)  # the last match left the filter
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
        filtered = bool(flt.states or flt.text)
        none = self.model.rowCount() == 0
        self.stack.setCurrentWidget(self.empty if none and not filtered else self.splitter)
        if none and filtered:
            chip = next((n for n, states in STATE_FILTERS.items() if states == flt.states), "All")
            self.no_match.setText(no_match_text(chip, flt.text))
            self.no_match.setGeometry(self.table.viewport().rect())
        self.no_match.setVisible(none and filtered)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.table.viewport() and event.type() == QEvent.Type.Resize:
            self.no_match.setGeometry(self.table.viewport().rect())  # centred as it resizes
        return super().eventFilter(watched, event)

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
        # Wanted while its row is selected too: selectRow clears the selection first, and
        # the pane showed nothing in between (and read the task again).
        self._wanted = task_id
        if row is not None:
            self.table.selectRow(row)  # replaces the selection: the pane follows it
            self._wanted = None
            self.table.scrollTo(self.model.index(row, 0))
        else:  # not loaded (yet): select nothing else, show it now, select its row on arrival
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
