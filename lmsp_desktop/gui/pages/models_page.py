"""The Models page: every model file with its digest and verification state, and actions."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from PySide6.QtCore import (
    QEvent,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QSettings,
    Qt,
    QTimer,
    QUrl,
)
from PySide6.QtGui import (
    QDesktopServices,
    QGuiApplication,
    QHelpEvent,
    QHideEvent,
    QPainter,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMenu,
    QMessageBox,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.fitting import is_local
from lmsp_desktop.core.models.info import ModelInfo
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.views import TaskChange
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.dialogs.download_dialog import DownloadDialog
from lmsp_desktop.gui.format import elide_path
from lmsp_desktop.gui.models.model_table import (
    COL_ARCH,
    COL_CONTEXT,
    COL_DIGEST,
    COL_FOLDER,
    COL_LOADED,
    COL_NAME,
    COL_PARAMS,
    COL_QUANT,
    COL_SIZE,
    COL_SOURCE,
    COL_STATUS,
    EXPLAIN,
    HEADERS,
    ModelTableModel,
    crash_text,
)
from lmsp_desktop.gui.models.model_table import Role as ModelRole
from lmsp_desktop.gui.pages.column_fit import ColumnFitter, column_menu, show_whole_text
from lmsp_desktop.gui.pages.model_memory import ModelMemoryPanel
from lmsp_desktop.gui.pages.progress_delegate import ProgressBarDelegate

# How long an action's success stays on the status line (the table shows it from then on):
# "Rescanned: …" lingered for minutes.
SAID_FOR_MS = 8000
# What a Name and a Loaded cell keep when cut for room: a name's first 20 letters or so (at
# 1200×780 with a hub download's name, Architecture stays), and a loaded model's countdown
# whole (a crash's longer cell is cut: its tooltip says it all). A long name is first cut to
# NAME_LETTERS_FIRST, which a short one ("smollm2-135m-instruct") fits whole: such a name is
# cut only after the Digest column went.
NAME_LETTERS = 20
NAME_LETTERS_FIRST = 24
LOADED_KEPT = "loaded · 10 min"


class RewordingDelegate(QStyledItemDelegate):
    """Paints a cell with the words `painted` gives it for the room it has (its model's text
    stays whole for tooltips, sorting and copying)."""

    def painted(self, opt: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> str:
        return opt.text

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = self.painted(opt, index)
        style = opt.widget.style() if opt.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)


class FolderDelegate(RewordingDelegate):
    """Paints a folder elided in its middle, keeping whole the end that tells it from the
    other folders listed (two "…/models" folders never read the same); full path on hover."""

    def shown_text(self, index: QModelIndex | QPersistentModelIndex, width: int) -> str:
        """The text painted in a cell `width` pixels wide."""
        opt = QStyleOptionViewItem()
        self.initStyleOption(opt, index)
        widget = self.parent()
        style = widget.style() if isinstance(widget, QWidget) else QApplication.style()
        margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin) + 1
        tail = index.data(ModelRole.FOLDER_TAIL) or ""
        return elide_path(opt.text, tail, width - 2 * margin, opt.fontMetrics)

    def painted(self, opt: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> str:
        return self.shown_text(index, opt.rect.width())


class DigestDelegate(QStyledItemDelegate):
    """A digest narrowed keeps both ends (`sha256:b179…db53`); the publisher's verdict keeps
    its start ("✓ matches…"), which says the most. Whole on hover either way."""

    def initStyleOption(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        super().initStyleOption(option, index)
        verdict = str(index.data() or "").startswith(("✓", "✗"))
        option.textElideMode = (
            Qt.TextElideMode.ElideRight if verdict else Qt.TextElideMode.ElideMiddle
        )


def short_context(text: str) -> str:
    """A Context cell's shorter form for a narrow column: `8,192 / 131k` for "8,192 of
    131,072", `8,192 (4,096 next)` for "8,192 (4,096 at next load)"; others as they are."""
    of = re.fullmatch(r"([\d,]+) of ([\d,]+)", text)
    if of:
        trained = int(of[2].replace(",", ""))
        shown = f"{round(trained / 1000):,}k" if trained >= 10_000 else of[2]
        return f"{of[1]} / {shown}"
    later = re.fullmatch(r"([\d,]+) \(([\d,]+) at next load\)", text)
    if later:
        return f"{later[1]} ({later[2]} next)"
    return text


class ContextDelegate(RewordingDelegate):
    """A Context cell in a column narrowed for room says its shorter form (`8,192 / 131k`)
    rather than being cut or dropping another column; the tooltip says it in words."""

    def shown_text(self, option: QStyleOptionViewItem) -> str:
        """The text painted for a cell initialised into `option`."""
        widget = option.widget
        style = widget.style() if widget is not None else QApplication.style()
        margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin) + 1
        room = option.rect.width() - 2 * margin
        if option.fontMetrics.horizontalAdvance(option.text) <= room:
            return option.text
        return short_context(option.text)

    def painted(self, opt: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> str:
        return self.shown_text(opt)


class ElidedDelegate(QStyledItemDelegate):
    """A cell narrowed for room (a long Name, a crashed or counting-down Loaded) rather than a
    column dropped: cut at the `mode` end, its whole text first in its tooltip while cut."""

    def __init__(self, mode: Qt.TextElideMode, parent: QWidget) -> None:
        super().__init__(parent)
        self.mode = mode

    def initStyleOption(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        super().initStyleOption(option, index)
        option.textElideMode = self.mode

    def is_cut(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> bool:
        """Whether the cell's text does not fit its width (the delegate's own hint says)."""
        return self.sizeHint(option, index).width() > option.rect.width()

    def helpEvent(
        self,
        event: QHelpEvent,
        view: QAbstractItemView,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> bool:
        if event.type() != QEvent.Type.ToolTip or not self.is_cut(option, index):
            return super().helpEvent(event, view, option, index)
        return show_whole_text(event, view, index)


def verify_outcome(info: ModelInfo) -> str:
    """The status line after verifying one model: that it is verified, or why not."""
    if info.state == "verified":
        return f"{info.id} verified: its digest matches the file."
    if info.state == "changed" and info.meta.get("observed_error"):
        return (
            f"{info.id} failed verification: the file now on disk is not a whole model "
            f"({info.meta['observed_error']}). Put the verified file back, then Verify "
            "selected."
        )
    if info.state == "changed":
        return f"{info.id} failed verification: the file no longer matches its digest."
    if info.state == "missing":
        return f"{info.id} failed verification: the file is missing."
    reason = info.meta.get("error") or "the file is not a usable model"
    return f"{info.id} failed verification: {reason}"


def state_now(info: ModelInfo, state: str) -> str:
    """The status line once a model's row is no longer in the state the line reported (a
    changed file accepted, a rescan, another client's verify): what the row says now."""
    if state == "verified":
        return verify_outcome(info)
    if state == "changed":
        return f"{info.id} changed since it was verified: it will not run until verified again."
    if state == "missing":
        return f"{info.id}: its file is missing."
    if state == "invalid":
        return f"{info.id} is not a usable model: {info.invalid_reason}"
    return f"Verifying {info.id}…"  # hashing, or not verified yet


def invalid_note(info: ModelInfo) -> str:
    """Why one model that is not a model is never offered to run, and what to do."""
    reason = info.invalid_reason or "it is not a GGUF model the engine can load"
    return (
        f"This file is never offered to run: {reason}. Replace it with a complete, intact "
        ".gguf file."
    )


def file_facts(info: ModelInfo) -> tuple[object, ...]:
    """What a model's estimate is made from, as its row says: another file, another estimate."""
    return (info.path, info.size_bytes, info.mtime_ns, info.digest, info.context_length)


class ModelsPage(QWidget):
    """Lists the registry's models; Add folder, Rescan, Verify selected, Open folder, Copy."""

    def __init__(
        self, core: CoreApi, parent: QWidget | None = None, qsettings: QSettings | None = None
    ) -> None:
        super().__init__(parent)
        self.core = core
        self.qsettings = qsettings  # where the columns the user showed or hid are kept
        self.model = ModelTableModel(core, parent=self)
        self.add_button = QPushButton("Add folder…")
        self.add_button.clicked.connect(self._ask_folder)
        self.rescan_button = QPushButton("Rescan")
        self.rescan_button.clicked.connect(lambda: aio.spawn(self.rescan(), self))
        self.verify_button = QPushButton("Verify selected")
        self.verify_button.setToolTip("Hash the selected files again and compare the digests")
        self.verify_button.clicked.connect(lambda: aio.spawn(self.verify_selected(), self))
        self.open_button = QPushButton("Open folder")
        self.open_button.clicked.connect(self.open_folder)
        self.copy_button = QPushButton("Copy digest")
        self.copy_button.clicked.connect(self.copy_digest)
        self.download_button = QPushButton("Download…")
        self.download_button.setToolTip("Get a GGUF model from the Hugging Face hub")
        self.download_button.clicked.connect(self.open_download)
        self.download_dialog: DownloadDialog | None = None
        # One button that says what it will do with the selected model: Load, Unload (LM
        # Studio's Eject, `ollama stop`), or Load again after its engine crashed.
        self.load_button = QPushButton("Load")
        self.load_button.clicked.connect(self.load_or_unload)
        # Models whose load or unload this page asked for and that has not answered yet: a
        # second click (a double-click) finds the model here and does nothing.
        self._acting: dict[str, str] = {}
        bar = QHBoxLayout()
        for button in (
            self.download_button,
            self.add_button,
            self.rescan_button,
            self.verify_button,
            self.open_button,
            self.copy_button,
            self.load_button,
        ):
            bar.addWidget(button)
        bar.addStretch()

        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.setItemDelegateForColumn(
            COL_STATUS, ProgressBarDelegate(ModelRole.PROGRESS, self.table)
        )
        self.folder_delegate = FolderDelegate(self.table)
        self.table.setItemDelegateForColumn(COL_FOLDER, self.folder_delegate)
        self.digest_delegate = DigestDelegate(self.table)
        self.table.setItemDelegateForColumn(COL_DIGEST, self.digest_delegate)
        # A long name keeps its tag (`…gguf:q4_1`), a Loaded cell its start ("✗ crashed (…").
        self.name_delegate = ElidedDelegate(Qt.TextElideMode.ElideMiddle, self.table)
        self.table.setItemDelegateForColumn(COL_NAME, self.name_delegate)
        self.loaded_delegate = ElidedDelegate(Qt.TextElideMode.ElideRight, self.table)
        self.table.setItemDelegateForColumn(COL_LOADED, self.loaded_delegate)
        self.context_delegate = ContextDelegate(self.table)
        self.table.setItemDelegateForColumn(COL_CONTEXT, self.context_delegate)
        header = self.table.horizontalHeader()
        self.table.setWordWrap(False)
        header.setMinimumSectionSize(40)
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # paths keep both ends
        # Name, Status and Loaded are never cut; Location takes what is left (its full path on
        # hover). In a narrower window the folder is elided first (its distinguishing end
        # whole, the path on hover), then the header facts step aside (the Name's tooltip has
        # them): at 1200×780 with the hub's long names Source, Context and Parameters showed
        # only after Architecture and Quantization went, and Source went once a model loaded.
        # At the default size (1398 px) the folder's few letters more had dropped
        # Architecture, and the publisher's verdict spelled out in Digest Quantization too.
        letters = self.fontMetrics().averageCharWidth()
        # A cell's margins (and a Loaded cell's dot) beside its text.
        pad = letters * 2
        self.name_least = name_least = letters * NAME_LETTERS + pad
        name_first = letters * NAME_LETTERS_FIRST + pad
        loaded_least = (
            self.table.fontMetrics().horizontalAdvance(LOADED_KEPT)
            + self.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize)
            + pad
        )
        context_least = self.table.fontMetrics().horizontalAdvance("88,888 / 888k") + pad
        self.fitter = ColumnFitter(
            self.table,
            stretch={COL_FOLDER: (letters * 16, letters * 22)},
            drop_order=[
                (COL_FOLDER, letters * 16),  # its distinguishing end stays whole
                # A hub download's long name ("lmsp-test/smollm2-135m-instruct-gguf:q4_1")
                # and a Loaded cell grown by a load ("loaded · 10 min", "✗ crashed (SIGKILL,
                # 18:48)") are cut, whole on hover, before a column goes: the columns stayed
                # put only until a model loaded or a download was listed.
                (COL_LOADED, loaded_least),
                (COL_NAME, name_first),
                (COL_DIGEST, letters * 16),  # both ends of a digest kept; whole on hover
                # "8,192 of 131,072" says "8,192 / 131k": the long form alone dropped Digest
                # at 1200×780.
                (COL_CONTEXT, context_least),
                # Then whole columns, the least needed by someone choosing a GGUF to run
                # first: the folder (Open folder acts on it; the Name's tooltip has the path),
                # the header facts that copies of one model share (Architecture, Parameters),
                # then the publisher's verdict (GUI.md's third edition; Verify acts on it) and
                # where it came from, the one column telling four copies of a model apart
                # (their names cut alike). Quantization and Context, what a GGUF user
                # compares, go last: at 1200×780 they went while Digest and Location stayed.
                COL_FOLDER,
                COL_ARCH,
                COL_PARAMS,
                COL_DIGEST,
                # At 900 px a short name stays whole while Digest goes; then names are cut.
                (COL_NAME, name_least),
                COL_SOURCE,
                COL_QUANT,
                COL_CONTEXT,
                COL_SIZE,
            ],
            draggable=True,
        )
        # Widths dragged on the header are kept in the window's settings, as the columns
        # shown or hidden are; written to disk once the drag rests (a drag resizes at every
        # mouse move).
        self._sync_soon = QTimer(self, singleShot=True, interval=300)
        self._sync_soon.timeout.connect(self._sync_settings)
        self.fitter.dragged_changed.connect(self._keep_widths)
        # Right-click on the header: a menu to show or hide columns (as LM Studio and file
        # managers have), kept in the window's settings.
        header.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        header.customContextMenuRequested.connect(self.open_column_menu)
        self.column_menu: QMenu | None = None
        self._restore_columns()
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update())
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._selection_moved())
        # A reload that resets the table (a rescan finding a new file) keeps the selection.
        self._kept_selection: list[str] = []
        self.model.modelAboutToBeReset.connect(self._keep_selection)
        self.model.modelReset.connect(self._restore_selection)
        self.model.modelReset.connect(self._update)
        self.model.dataChanged.connect(lambda *_: self._update())
        self.explain = QLabel()
        self.explain.setWordWrap(True)
        self.explain.hide()
        # What the last action did ("Verifying NAME…", then its outcome): a click always
        # shows a response, even when the row's state does not change.
        self.status = QLabel()
        self.status.setWordWrap(True)
        # The model and the state the status line reported, and the reloads begun by then:
        # once a row read later says otherwise the line follows it (a "failed verification"
        # stayed after the file was accepted). A row read before could be older than the line.
        self._reported: tuple[str, str, int] | None = None
        # The model the line speaks of (None: of none, or of the list): it goes when that
        # model is no longer selected. With the loaded state it had when the line was said:
        # once the model is in another (its engine crashed, it was unloaded) the line says so.
        self._about: str | None = None
        self._loaded_said: str | None = None
        self._said_for = QTimer(self, singleShot=True, interval=SAID_FOR_MS)
        self._said_for.timeout.connect(self._clear_status)
        self._selected_ids: set[str] = set()  # the selection the line was last checked with
        self._resetting = False  # a reload replaces the rows: its selection changes are none
        # The selected row's values the Load settings panel last estimated from: a file
        # accepted anew (another size, another header) is estimated again.
        self._estimated: tuple[object, ...] | None = None
        # What the last scan could not list (the rest of the list is unaffected).
        self.problems = QLabel()
        self.problems.setWordWrap(True)
        self.problems.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problems.hide()
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.table)
        layout.addWidget(self.problems)
        layout.addWidget(self.explain)
        layout.addWidget(self.status)
        # The selected model's load settings and what loading it will take.
        self.memory = ModelMemoryPanel(core, self)
        layout.addWidget(self.memory)
        self._clock = QTimer(self, interval=5000)  # idle countdowns of loaded models
        self._clock.timeout.connect(self.model.tick)
        # And the contexts the models run with (a `models set … --context` from a shell).
        self._clock.timeout.connect(self.read_contexts_soon)
        self._contexts_task: asyncio.Task[None] | None = None
        self._contexts_again = False
        self.model.modelReset.connect(self.read_contexts_soon)
        self._clock.start()
        self._update()

    def connect_bridge(self, bridge: CoreBridge) -> None:
        bridge.models_changed.connect(self.model.schedule_reload)
        self.model.modelReset.connect(self.fit_columns)
        bridge.model_progress.connect(self.model.set_progress)
        bridge.loaded_changed.connect(self.model.set_loaded)
        bridge.loaded_changed.connect(self.read_contexts_soon)
        bridge.tasks_changed.connect(self.on_task_changes)

    def on_task_changes(self, changes: dict[str, TaskChange]) -> None:
        """A task that failed to load its model marks the model's row with the reason."""
        failed = [c for c in changes.values() if c.state == TaskState.FAILED]
        if failed:
            aio.spawn(self._mark_failed_loads(failed), self)

    async def _mark_failed_loads(self, failed: list[TaskChange]) -> None:
        for change in failed:
            try:
                row = await self.core.task(change.task_id)
            except LmspError:  # deleted meanwhile
                continue
            error = json.loads(row["error"]) if row["error"] else None
            if error and error.get("code") == "model_load_failed":
                self.model.set_load_failed(change.model, error["message"])

    def set_active(self, active: bool) -> None:
        """The idle countdowns move, and the Load settings follow the store, only while the
        window is shown."""
        if active:
            self.model.tick()
            self._clock.start()
        else:
            self._clock.stop()
        self.memory.set_watching(active)

    async def load(self) -> None:
        await self.model.reload()
        await self.read_contexts()
        self.fit_columns()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.read_contexts_soon()

    def hideEvent(self, event: QHideEvent) -> None:
        """A page not shown (another page, the window closing) reads no contexts: the one
        reading stops, or it would go on querying a core that stops after the window."""
        if self._contexts_task is not None:
            self._contexts_task.cancel()
        super().hideEvent(event)

    def read_contexts_soon(self, *_: object) -> None:
        """Read the contexts again, once at a time (a read asked for meanwhile follows it);
        none while the page is not shown (load() reads them when it is)."""
        if not self.isVisible():
            return
        if self._contexts_task is not None and not self._contexts_task.done():
            self._contexts_again = True
            return
        self._contexts_task = aio.spawn(self.read_contexts(), self)

    async def read_contexts(self) -> None:
        """What each local model runs with (or would, loaded now): the Context column says it
        beside what it was trained for, as `models list` does."""
        while True:
            self._contexts_again = False
            contexts: dict[str, int] = {}
            loaded: dict[str, int] = {}
            for model_id in [self.model.model_id(r) for r in range(self.model.rowCount())]:
                row = self.model.row_of(model_id)
                info = self.model.info(row) if row is not None else None
                if info is None or not is_local(info) or info.state == "invalid":
                    continue
                try:
                    wanted = await self.core.model_settings(model_id)
                    plan = await self.core.memory_plan(model_id, wanted)
                except LmspError:  # gone meanwhile, or the store closing
                    continue
                if plan is not None:
                    contexts[model_id] = plan.context_length
                # What it runs with now, as the runner loaded it (never planned again here).
                now = self.core.model_loaded_context(model_id)
                if now is not None:
                    loaded[model_id] = now
            self.model.set_contexts(contexts, loaded)
            if not self._contexts_again:
                return

    def fit_columns(self) -> None:
        self.fitter.fit()

    # -- columns the user shows or hides ------------------------------------------------------
    def open_column_menu(self, pos: QPoint) -> QMenu:
        """The header's menu: each column but the Name, ticked when shown; one left out for
        room says so, and ticking it makes others give way first; Reset columns."""
        menu = column_menu(self, self.fitter, HEADERS, fixed={COL_NAME}, changed=self._save_columns)
        self.column_menu = menu
        menu.popup(self.table.horizontalHeader().mapToGlobal(pos))  # never exec() here
        return menu

    def set_column_wanted(self, col: int, wanted: bool) -> None:
        self.fitter.set_wanted(col, wanted)
        self._save_columns()

    def _save_columns(self) -> None:
        if self.qsettings is None:
            return
        # By title, not number: a column added in a later version does not shift them.
        hidden = ",".join(HEADERS[c] for c in sorted(self.fitter.unwanted))
        self.qsettings.setValue("models/hidden_columns", hidden)
        self.qsettings.setValue(
            "models/asked_columns", ",".join(HEADERS[c] for c in self.fitter.pinned)
        )
        self._keep_widths()
        self.qsettings.sync()  # a user's click, now and then: kept even if the app is killed

    def _keep_widths(self) -> None:
        if self.qsettings is None:
            return
        widths = sorted(self.fitter.dragged.items())
        self.qsettings.setValue(
            "models/column_widths", ",".join(f"{HEADERS[c]}={px}" for c, px in widths)
        )
        self._sync_soon.start()

    def _sync_settings(self) -> None:
        if self.qsettings is not None:
            self.qsettings.sync()

    def _restore_columns(self) -> None:
        if self.qsettings is None:
            return

        def columns(key: str) -> list[int]:
            titles = str(self.qsettings.value(key, "") if self.qsettings else "").split(",")
            return [HEADERS.index(t) for t in titles if t in HEADERS and t != HEADERS[COL_NAME]]

        self.fitter.unwanted = set(columns("models/hidden_columns"))
        self.fitter.pinned = [
            c for c in columns("models/asked_columns") if c not in self.fitter.unwanted
        ]
        for pair in str(self.qsettings.value("models/column_widths", "")).split(","):
            title, _, px = pair.partition("=")
            if title in HEADERS and px.isdigit() and int(px) > 0:
                self.fitter.dragged[HEADERS.index(title)] = int(px)

    def selected_rows(self) -> list[int]:
        return sorted({i.row() for i in self.table.selectionModel().selectedRows()})

    def _update(self) -> None:
        rows = self.selected_rows()
        for button in (self.verify_button, self.open_button):
            button.setEnabled(bool(rows))
        self.copy_button.setEnabled(
            len(rows) == 1 and bool(self.model.index(rows[0], 0).data(ModelRole.DIGEST))
        )
        local = len(rows) == 1 and is_local(self.model.info(rows[0]))
        shown = self.model.model_id(rows[0]) if local else None
        facts = file_facts(self.model.info(rows[0])) if local else None
        if shown != self.memory.model_id:
            aio.spawn(self.memory.show_model(shown), self)
        elif shown is not None and facts != self._estimated:
            aio.spawn(self.memory.refresh(), self)
        self._estimated = facts
        info = self.model.info(rows[0]) if local else None
        self.memory.set_cannot_run(
            info.invalid_reason if info is not None and info.state == "invalid" else None
        )
        self._follow_row()
        self._follow_loaded()
        text, enabled, tip = self.load_action(rows[0] if len(rows) == 1 else None)
        self.load_button.setText(text)
        self.load_button.setEnabled(enabled)
        self.load_button.setToolTip(tip)
        states = {self.model.index(r, 0).data(ModelRole.STATE) for r in rows}
        notes = [EXPLAIN[s] for s in ("changed", "missing", "invalid") if s in states]
        if len(rows) == 1 and states == {"invalid"}:  # its own reason, not an either/or
            notes = [invalid_note(self.model.info(rows[0]))]
        self.explain.setText(" ".join(notes))
        self.explain.setVisible(bool(notes))
        problems = self.model.problems
        self.problems.setText("\n".join(f"⚠ {p[:1].upper()}{p[1:]}" for p in problems))
        self.problems.setVisible(bool(problems))

    def _follow_row(self) -> None:
        if self._reported is None:
            return
        model_id, reported, reads_then = self._reported
        if self.model.rows_read <= reads_then:
            return
        row = self.model.row_of(model_id)
        if row is None:  # no longer listed
            self._reported = None
            self.status.clear()
            return
        info = self.model.info(row)
        if info.state != reported:
            self._report(info, state_now(info, info.state))

    def _follow_loaded(self) -> None:
        """A line said of a model's load or unload follows the model's loaded state once the
        page's own action is over: "X is loaded." went on after its engine was killed."""
        about, said = self._about, self._loaded_said
        if about is None or said is None or about in self._acting:
            return
        now = self.core.model_loaded_state(about)
        if now == said:
            return
        crash = self.model.crash_shown(about) if now == "unloaded" else None
        if crash is not None:
            self._say(crash_text(crash).replace("this model", about, 1), about, loads=True)
        elif now == "loaded":
            self._say(f"{about} is loaded.", about, lasting=False, loads=True)
        elif now == "loading":
            self._say(f"Loading {about}…", about, loads=True)
        else:
            self._say(f"{about} is unloaded.", about, lasting=False, loads=True)

    def _selection_moved(self) -> None:
        """Another selection: a line about a model no longer selected goes, and so does a
        success already shown (the next action's), or a line about no model."""
        ids = {self.model.model_id(r) for r in self.selected_rows()}
        if self._resetting or ids == self._selected_ids:
            return
        self._selected_ids = ids
        if self._said_for.isActive() or self._about not in ids:
            self._clear_status()

    def _clear_status(self) -> None:
        self._said_for.stop()
        self.status.clear()
        self._reported = None
        self._about = self._loaded_said = None

    def _shown(self, about: str | None) -> bool:
        """Whether a line about the model `about` is shown: only while it is selected (one
        said of a model the user moved away from clears the line it had instead)."""
        if about is None or about in {self.model.model_id(r) for r in self.selected_rows()}:
            return True
        if self._about == about:
            self._clear_status()
        return False

    def _say(
        self, text: str, about: str | None = None, *, lasting: bool = True, loads: bool = False
    ) -> None:
        """A line of its own (an action under way, its outcome, a refusal), `about` a model
        or none; one of its load or unload (`loads`) follows its loaded state. One not
        `lasting` (a success, which the table shows from then on) clears after SAID_FOR_MS;
        any clears at the next selection that leaves its model."""
        if not self._shown(about):
            return
        self.status.setText(text)
        self._reported = None
        self._about = about
        self._loaded_said = self.core.model_loaded_state(about) if about and loads else None
        if lasting:
            self._said_for.stop()
        else:
            self._said_for.start()

    def _report(self, info: ModelInfo, text: str) -> None:
        """A verify's outcome: it follows the row's state (_follow_row)."""
        if not self._shown(info.id):
            return
        self._said_for.stop()
        self.status.setText(text)
        self._reported = (info.id, info.state, self.model.reads_begun)
        self._about, self._loaded_said = info.id, None

    def _keep_selection(self) -> None:
        self._resetting = True
        self._kept_selection = [self.model.model_id(r) for r in self.selected_rows()]

    def _restore_selection(self) -> None:
        selection = QItemSelection()
        for model_id in self._kept_selection:
            row = self.model.row_of(model_id)
            if row is not None:
                index = self.model.index(row, 0)
                selection.select(index, index)
        flags = QItemSelectionModel.SelectionFlag
        self.table.selectionModel().select(selection, flags.ClearAndSelect | flags.Rows)
        self._kept_selection = []
        self._resetting = False
        self._selection_moved()  # a model no longer listed leaves the selection

    # -- actions -----------------------------------------------------------------------------
    def _ask_folder(self) -> None:
        dialog = QFileDialog(self, "Add a model folder")
        dialog.setFileMode(QFileDialog.FileMode.Directory)
        dialog.setOption(QFileDialog.Option.ShowDirsOnly)
        dialog.fileSelected.connect(lambda path: aio.spawn(self.add_folder(Path(path)), self))
        self.folder_dialog = dialog
        dialog.open()  # never exec() on the service's loop

    async def add_folder(self, folder: Path) -> None:
        """Scan a folder and keep it as a model folder (it shows in Settings from now on)."""
        self.add_button.setEnabled(False)
        try:
            await self.core.add_model_folder(folder)
        finally:
            self.add_button.setEnabled(True)

    async def rescan(self) -> None:
        self.rescan_button.setEnabled(False)
        try:
            changed = await self.core.rescan_models()  # a Rescan answers, even "nothing"
            self._say(
                "Rescanned: " + ("the list shows what changed." if changed else "nothing changed."),
                lasting=False,
            )
        finally:
            self.rescan_button.setEnabled(True)

    def load_action(self, row: int | None) -> tuple[str, bool, str]:
        """What the load button does for the model in `row` (None: not one model selected):
        its text, whether it is enabled, and its tooltip."""
        info = self.model.info(row) if row is not None else None
        if info is None or not is_local(info):
            return "Load", False, "Select a model on this machine to load or unload it."
        acting = self._acting.get(info.id)
        if acting is not None:
            return acting, False, "Wait for it to finish."
        loaded = self.core.model_loaded_state(info.id)
        if loaded == "loading":
            return "Loading…", False, "It is loading: the Loaded column shows when it is ready."
        if loaded == "loaded":
            return (
                "Unload",
                True,
                "Free the memory it holds now (its running tasks finish first); the next "
                "request, or Load, loads it again with its saved Load settings.",
            )
        state = self.model.state_of(info)
        if state != "verified":
            why = {
                "invalid": "it is not a model the engine can load",
                "missing": "its file is missing",
                "changed": "its file changed since it was verified",
            }.get(state, "it is not verified yet")
            return "Load", False, f"It cannot be loaded: {why}."
        if self.model.crash_shown(info.id) is not None:
            return "Load again", True, "Load the model whose engine crashed."
        return (
            "Load",
            True,
            "Load it now with its Load settings, so the first request does not wait for it.",
        )

    def load_or_unload(self) -> None:
        """The load button: load the selected model, or unload it when it is loaded. Marked
        as under way before anything is awaited, so a double-click acts once."""
        rows = self.selected_rows()
        if len(rows) != 1:
            return
        text, enabled, _ = self.load_action(rows[0])
        if not enabled:
            return
        model_id = self.model.model_id(rows[0])
        unloading = text == "Unload"
        self._acting[model_id] = "Unloading…" if unloading else "Loading…"
        self._say(f"{self._acting[model_id][:-1]} {model_id}…", model_id, loads=True)
        self._update()
        aio.spawn(self.unload(model_id) if unloading else self.load_model(model_id), self)

    async def load_model(self, model_id: str) -> None:
        """Load a model now (after a crash too: a model held after two crashes included)."""
        try:
            await self.core.load_model_again(model_id)
        except LmspError as exc:
            self._say(f"{model_id} could not be loaded: {exc.message}", model_id, loads=True)
        else:
            self._say(f"{model_id} is loaded.", model_id, lasting=False, loads=True)
        finally:
            self._acting.pop(model_id, None)
            self._update()

    async def unload(self, model_id: str) -> None:
        """Unload a model: now, or once the tasks running on it end."""
        try:
            now = await self.core.unload_model(model_id)
            self.model.unloaded_by_hand(model_id)  # its last crash is not shown any more
        except LmspError as exc:
            self._say(f"{model_id} could not be unloaded: {exc.message}", model_id, loads=True)
        else:
            self._say(
                f"{model_id} is unloaded: its memory is free."
                if now
                else f"{model_id} unloads once the tasks running on it end.",
                model_id,
                lasting=not now,
                loads=True,
            )
        finally:
            self._acting.pop(model_id, None)
            self._update()

    async def verify_selected(self) -> None:
        ids = [self.model.model_id(r) for r in self.selected_rows()]
        self.verify_button.setEnabled(False)
        try:
            for model_id in ids:
                self._say(f"Verifying {model_id}…", model_id)
                try:
                    info = await self.core.verify_model(model_id)
                except LmspError as exc:
                    self._say(f"{model_id} could not be verified: {exc.message}", model_id)
                    continue
                self._report(info, verify_outcome(info))
                if info.state == "changed" and not info.meta.get("observed_error"):
                    self._offer_accept(info)  # a cut file is no candidate: said why instead
        finally:
            self._update()

    async def accept_new(self, model_id: str) -> None:
        """Record the file as it is now as the model's (the owner replaced it on purpose)."""
        self._say(f"Verifying {model_id} as a new file…", model_id)
        try:
            info = await self.core.verify_model(model_id, accept_new=True)
        except LmspError as exc:
            self._say(f"{model_id} could not be verified: {exc.message}", model_id)
        else:
            self._report(info, verify_outcome(info))
        finally:
            self._update()

    def _offer_accept(self, info: ModelInfo) -> None:
        """A file whose digest differs stays refused unless the owner accepts it as new."""
        box = QMessageBox(
            QMessageBox.Icon.Warning,
            "Model file changed",
            f"{info.path} no longer matches the digest recorded when it was verified, so "
            f"{info.id} will not run. If you replaced the file on purpose, accept the new "
            "file; otherwise restore the original.",
            parent=self,
        )
        box.addButton("Accept the new file", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Keep refusing it", QMessageBox.ButtonRole.RejectRole)
        box.accepted.connect(lambda: aio.spawn(self.accept_new(info.id), self))
        self.accept_box = box
        box.open()

    def open_download(self) -> None:
        """The Download dialog: one at a time, and not modal, so the Tasks table it points to
        ("follow it in the Tasks table (Cancel works there)") can be used while it is open
        (never exec() on the service's loop). A second click brings it to the front."""
        if self.download_dialog is None:
            self.download_dialog = DownloadDialog(self.core, self)
            self.download_dialog.setModal(False)
            self.download_dialog.setWindowModality(Qt.WindowModality.NonModal)
        if self.download_dialog.isVisible():  # behind the window: brought to the front
            self.download_dialog.raise_()
            self.download_dialog.activateWindow()
        else:
            self.download_dialog.show()

    def open_folder(self) -> bool:
        """Open the selected model's folder in the file manager; where none exists, say
        where the folder is and copy its path (the click did nothing visible)."""
        for row in self.selected_rows()[:1]:
            folder = Path(self.model.index(row, 0).data(ModelRole.PATH)).parent
            if QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
                return True
            QGuiApplication.clipboard().setText(str(folder))
            self._say(
                f"No file manager could open the folder. It is {folder} "
                "(its path is copied: paste it in a terminal or file dialog)."
            )
        return False

    def copy_digest(self) -> None:
        rows = self.selected_rows()
        if rows:
            QGuiApplication.clipboard().setText(self.model.index(rows[0], 0).data(ModelRole.DIGEST))
