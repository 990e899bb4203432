"""Download…: search the Hugging Face hub, pick a repo's GGUF file, download it as a task.

Every hub call runs off the event loop (the core's worker threads); the dialog only awaits
them. The download itself is a task like any other: it appears in the task table with its
progress, speed and time left, and Cancel there stops it.
"""

from __future__ import annotations

import functools
import json

import shiboken6
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.downloads.hub import GgufChoice, parse_reference
from lmsp_desktop.core.downloads.pull import download_name
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.info import CHANGED, INVALID, MISSING, ModelEvent, ModelInfo
from lmsp_desktop.core.models.memory import gib
from lmsp_desktop.core.states import TERMINAL, EventType, TaskKind, TaskState
from lmsp_desktop.core.views import TaskChange
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import human_size

FILE_COLUMNS = ["File", "Quant", "Size", "On this machine", ""]
COL_FIT = 3
COL_RETRY = 4  # a Retry button on the rows whose download failed or was cancelled
FIT_WORDS = {"fits": "✓ fits", "tight": "⚠ tight", "wont_fit": "✗ won't fit"}
FIT_COLORS = {"fits": "#2e9e44", "tight": "#c98a00", "wont_fit": "#e04848"}
RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
# A local model's source (ModelInfo.source) as the "already on this machine" line names it.
SOURCE_WORDS = {
    "lmstudio": "LM Studio",
    "ollama": "Ollama",
    "folder": "folder",
    "huggingface": "Hugging Face cache",
    "demo": "demo",
}
# A local model in these states is no copy to use instead of a download: its file is gone,
# is no model, or is no longer the file its digest was taken of.
NOT_A_COPY = (MISSING, INVALID, CHANGED)
DOWNLOADING = "↓ downloading…"  # ↓ is in every UI font (⇣ is not)
# A download that cannot reach the hub and waits to try again (its progress has retry_at).
WAITING = "↻ waiting for the hub"


class DownloadDialog(QDialog):
    """Search → repo → file → Download. Emits `started` with the new task's id."""

    started = Signal(str)

    def __init__(self, core: CoreApi, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Download a model from Hugging Face")
        self.core = core
        self.choices: list[GgufChoice] = []
        self.repo = ""
        self.estimating: set[tuple[str, str]] = set()  # (repo, file) asked of the core
        # What each file's estimate said, for the status line of the file selected, and its
        # cell's words (its line, tooltip, colour), kept for the repo listed again: the cell
        # of a file estimated before said "memory: select to check" for good (its estimate
        # is asked once), and one answering while the repo was listed again was lost.
        self.fit_notes: dict[tuple[str, str], str] = {}
        self.fit_cells: dict[tuple[str, str], tuple[str, str, str | None]] = {}
        # (repo, file) → its download task, not ended yet: started from here, or (heard of
        # by its name) from `models pull` or the API. Its row says "downloading…" and Download
        # is off for it only while it runs (the line said so after a cancel, reopened).
        self.downloading: dict[tuple[str, str], str] = {}
        # The shown repo's files by the name their download task has (lower-case): a task
        # of one of them started elsewhere is followed as one started here.
        self.task_names: dict[str, str] = {}
        # (repo, file) → how its download started here ended, when it failed or was
        # cancelled: ("failed", the error's sentence) or ("cancelled", ""). Its row says so
        # and has Retry, which pulls it again (continuing from the bytes a failure kept).
        self.ended: dict[tuple[str, str], tuple[str, str]] = {}
        self.on_disk: set[str] = set()  # the shown repo's files already in the cache
        # The followed downloads waiting to try the hub again (their progress has retry_at).
        self.waiting: set[tuple[str, str]] = set()
        # A hub address typed in the search box that names a file: (repo, file or quant),
        # its row selected once the repo is listed.
        self.wanted: tuple[str, str | None] | None = None
        # The shown repo's files whose every part's sha256 (the hub's LFS digest) is a local
        # model's (LM Studio's, Ollama's, a folder's): name → that model.
        self.local_copies: dict[str, ModelInfo] = {}
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search the hub, e.g. qwen2.5 7b instruct, or owner/repo")
        self.query.returnPressed.connect(lambda: aio.spawn(self.search(), self))
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(lambda: aio.spawn(self.search(), self))
        self.repos = QListWidget()
        # Repo ids are long ("bartowski/Qwen2.5-Coder-7B-Instruct-GGUF"): the list gets room.
        self.repos.setMinimumWidth(self.fontMetrics().averageCharWidth() * 34)
        self.repos.currentItemChanged.connect(self._repo_picked)
        self.files = QTableWidget(0, len(FILE_COLUMNS))
        self.files.setHorizontalHeaderLabels(FILE_COLUMNS)
        self.files.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.files.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.files.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.files.verticalHeader().hide()
        # Rows as tall as their lines (a long name wraps; a downloaded file says so below).
        self.files.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header = self.files.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)  # the rest is whole
        # A name too long for its column loses its middle, not its quant and ".gguf" end
        # (its tooltip has it whole).
        self.files.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.files.itemSelectionChanged.connect(self._update)
        self.files.setColumnHidden(COL_RETRY, True)  # until a download here fails
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("Hugging Face token, for gated or private repos")
        self.token_button = QPushButton("Keep token")
        self.token_button.clicked.connect(self.keep_token)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.download_button = self.buttons.addButton(
            "Download", QDialogButtonBox.ButtonRole.ActionRole
        )
        self.download_button.clicked.connect(lambda: aio.spawn(self.download(), self))
        self.buttons.rejected.connect(self.reject)
        # Enter belongs to the search box: no button is the dialog's default. Opened a second
        # time, the focus was on Close (clicked to close it), Close became the default, and
        # typing a query and pressing Enter closed the dialog.
        for button in [self.search_button, self.token_button, *self.buttons.buttons()]:
            if isinstance(button, QPushButton):
                button.setAutoDefault(False)
                button.setDefault(False)

        search_row = QHBoxLayout()
        search_row.addWidget(self.query, 1)
        search_row.addWidget(self.search_button)
        token_row = QHBoxLayout()
        token_row.addWidget(self.token, 1)
        token_row.addWidget(self.token_button)
        split = self.split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.repos)
        split.addWidget(self.files)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        split.setSizes([340, 480])
        self.lent = 0  # px the repo list gave the file table for its Retry column
        layout = QVBoxLayout(self)
        layout.addLayout(search_row)
        layout.addWidget(split, 1)
        layout.addLayout(token_row)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)
        self.resize(820, 460)
        self._show_token_state()
        self._update()
        core.subscribe(self)
        # Deleted with its page (a closed window, a test): stop hearing of tasks.
        self.destroyed.connect(functools.partial(_forget, core, self))

    def showEvent(self, event: QShowEvent) -> None:  # Qt names it so
        """Each time it opens, the search box has the focus (the first time only, it did),
        its text selected so typing replaces it."""
        super().showEvent(event)
        self.query.setFocus(Qt.FocusReason.OtherFocusReason)
        self.query.selectAll()

    # -- news from the core (CoreListener) ---------------------------------------------------
    def on_task(self, change: TaskChange) -> None:
        """A download of a file listed here began (from here, `models pull`, the API): its row
        says so; one ended (cancelled in Tasks, failed, completed): its row says how, and the
        status line stops saying it is downloading. Called for every task's commits: the
        others return at once."""
        if change.kind != TaskKind.DOWNLOAD:
            return
        if change.state not in TERMINAL:
            self._heard_of(change)
            if EventType.DOWNLOAD_PROGRESS in change.event_types:
                for key, task_id in self.downloading.items():
                    if task_id == change.task_id:
                        aio.spawn(self._progress(key, task_id), self)
            return
        for key, task_id in list(self.downloading.items()):
            if task_id != change.task_id:
                continue
            del self.downloading[key]
            self.waiting.discard(key)
            if change.state == TaskState.COMPLETED and key[0] == self.repo:
                self.on_disk.add(key[1])
            if change.state == TaskState.FAILED:
                self.ended[key] = ("failed", "")
                aio.spawn(self._failure(key, task_id), self)
            elif change.state == TaskState.CANCELLED:
                self.ended[key] = ("cancelled", "")
            self._show_ended(key)
            self._update()

    def _heard_of(self, change: TaskChange) -> None:
        """A running download of one of the shown files that this dialog does not follow
        yet (started elsewhere, or before the dialog listed the repo): follow it."""
        name = self.task_names.get(change.model.lower())
        if name is None or change.task_id in self.downloading.values():
            return
        key = (self.repo, name)
        self.downloading[key] = change.task_id
        self.ended.pop(key, None)
        self._show_ended(key)
        self._update()

    async def _progress(self, key: tuple[str, str], task_id: str) -> None:
        """A followed download's latest progress: whether it waits for the hub (its cell
        said "downloading…" while the task waited to try again)."""
        try:
            row = await self.core.task(task_id)
        except LmspError:  # deleted meanwhile
            return
        progress = json.loads(row["snapshot"] or "null") if row["snapshot"] else None
        waits = isinstance(progress, dict) and bool(progress.get("retry_at"))
        if self.downloading.get(key) != task_id or waits == (key in self.waiting):
            return
        if waits:
            self.waiting.add(key)
        else:
            self.waiting.discard(key)
        self._show_ended(key)

    async def _failure(self, key: tuple[str, str], task_id: str) -> None:
        """The failed download's error, for the status line of its file."""
        try:
            row = await self.core.task(task_id)
        except LmspError:  # deleted meanwhile
            return
        error = json.loads(row["error"]) if row["error"] else {}
        if self.ended.get(key, ("",))[0] == "failed":
            self.ended[key] = ("failed", str(error.get("message") or ""))
            choice = self.selected_choice()
            if choice is not None and key == (self.repo, choice.name):
                self._describe(choice)

    def on_model(self, event: ModelEvent | None) -> None:
        pass

    def on_model_loaded(self, model_id: str, state: str) -> None:
        pass

    def on_pairing(self) -> None:
        pass

    # -- searching ---------------------------------------------------------------------------
    async def search(self) -> None:
        text = self.query.text().strip()
        if not text:
            return
        # A repo named as the hub's addresses name it (hf.co/owner/name:Q4_K_M, a pasted
        # https://huggingface.co/… of the repo or a file): searched and opened as its id.
        ref: tuple[str, str | None] | None = None
        if "/" in text and " " not in text:
            try:
                ref = parse_reference(text)
            except LmspError:
                ref = None
        query = ref[0] if ref is not None else text
        self.search_button.setEnabled(False)
        self.status.setText("Searching…")
        try:
            found = await self.core.hub_search(query)
        except LmspError as exc:
            self.status.setText(exc.message)
            return
        finally:
            self.search_button.setEnabled(True)
        self.repos.clear()
        for repo in found:
            # Two lines: the id whole, then its downloads (on one line the count was cut:
            # "lmsp-test/SmolLM2-135M-Instruct-GGUF  ·  500 downl…" at the dialog's size).
            item = QListWidgetItem(f"{repo['id']}\n{repo.get('downloads') or 0:,} downloads")
            item.setToolTip(item.text())
            item.setData(Qt.ItemDataRole.UserRole, repo["id"])
            self.repos.addItem(item)
        if ref is not None and ref[0] not in {r["id"] for r in found}:
            item = QListWidgetItem(f"{ref[0]}\n(open this repo)")  # a repo id typed whole
            item.setData(Qt.ItemDataRole.UserRole, ref[0])
            self.repos.insertItem(0, item)
        count = self.repos.count()
        self.status.setText(
            f"{count} {'repo' if count == 1 else 'repos'} with GGUF files."
            if count
            else f"No repo with GGUF files matches {text!r}."
        )
        if ref is not None and ref[0] != text:  # an address, or a file named: opened at once
            self.wanted = ref
            for row in range(self.repos.count()):
                if self.repos.item(row).data(Qt.ItemDataRole.UserRole) == ref[0]:
                    self.repos.setCurrentRow(row)
                    break

    def _repo_picked(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            aio.spawn(self.show_repo(str(item.data(Qt.ItemDataRole.UserRole))), self)

    async def show_repo(self, repo: str) -> None:
        self.repo = repo
        self.files.setRowCount(0)
        self.choices = []
        self.status.setText(f"Listing {repo}…")
        self._update()
        try:
            choices = await self.core.hub_models(repo)
        except LmspError as exc:
            self.status.setText(exc.message)
            return
        on_disk = await self.core.hub_downloaded(repo, choices)
        local = await self._local_copies(choices)
        if repo != self.repo:
            return  # another repo was picked meanwhile
        self.choices, self.on_disk, self.local_copies = choices, on_disk, local
        self.task_names = {download_name(repo, choices, c).lower(): c.name for c in choices}
        self.files.setRowCount(len(choices))
        for row, choice in enumerate(choices):
            cells = [
                choice.label(),
                choice.quant or "?",
                human_size(choice.size),
                self._on_disk_mark(choice) + "memory: select to check",
            ]
            for col, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                if col == 0:
                    cell.setToolTip(choice.label())
                if col == 2:
                    cell.setTextAlignment(
                        Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                    )
                self.files.setItem(row, col, cell)
        for choice in choices:
            self._paint_estimate((repo, choice.name))
            self._show_ended((repo, choice.name))
        wanted, self.wanted = self.wanted, None
        if wanted is not None and wanted[0] == repo and wanted[1]:
            named = _row_named(choices, wanted[1])
            if named is not None:
                self.files.selectRow(named)  # the status line speaks of it
                return
        self.status.setText(
            f"{repo}: {len(choices)} GGUF model{'' if len(choices) == 1 else 's'}. Pick one "
            "and Download; it lands in the "
            "Hugging Face cache, shared with other tools."
            if choices
            else f"{repo} has no GGUF files. LMSP runs GGUF models: look for a GGUF conversion."
        )

    async def _local_copies(self, choices: list[GgufChoice]) -> dict[str, ModelInfo]:
        """The choices a local model already holds, byte for byte: its digest is the hub's
        sha256 of the file (a split model: of its only part; the parts of one are separate
        local files, none of them the whole model)."""
        by_digest = {
            m.digest: m
            for m in await self.core.models()
            if m.digest and m.state not in NOT_A_COPY  # a deleted file is no copy
        }
        found: dict[str, ModelInfo] = {}
        for choice in choices:
            sha = choice.files[0].sha256 if len(choice.files) == 1 else None
            model = by_digest.get(f"sha256:{sha.lower()}") if sha else None
            if model is not None:
                found[choice.name] = model
        return found

    # -- downloading -------------------------------------------------------------------------
    def selected_choice(self) -> GgufChoice | None:
        rows = {i.row() for i in self.files.selectedIndexes()}
        return self.choices[rows.pop()] if len(rows) == 1 else None

    async def download(self) -> str | None:
        choice = self.selected_choice()
        if choice is None:
            return None
        return await self.pull(self.repo, choice)

    async def retry(self, repo: str, choice: GgufChoice) -> str | None:
        """The row's Retry: the same download as Download would start (continuing from the
        bytes a failure kept on disk; a cancelled one deleted them)."""
        return await self.pull(repo, choice)

    async def pull(self, repo: str, choice: GgufChoice) -> str | None:
        """Start the download of `repo`'s `choice` (or join the one under way): Download's
        and Retry's one path. Its row becomes the selected one (the status line speaks of
        it) and the current one: the clicked button (Download, or the row's Retry) is
        disabled, or goes once the download starts, and its focus moves to the table, which
        took a table without a current cell as leave to select another row (walkH19: a
        second click on Download would then have fetched a file not chosen)."""
        key = (repo, choice.name)
        row = self._row_of(key)
        if row is not None:
            self.files.setCurrentCell(row, 0)
            self.files.setFocus()  # before the buttons it leaves are disabled
        self.download_button.setEnabled(False)
        button = self._retry_button(key)
        if button is not None:
            button.setEnabled(False)
        self._keep_selected(row, choice)
        try:
            task_id = await self.core.pull_model(repo, choice.name)
        except LmspError as exc:
            self._update()
            self.status.setText(exc.message)
            if button is not None and shiboken6.isValid(button):
                button.setEnabled(True)
            return None
        self.downloading[key] = task_id
        self.ended.pop(key, None)
        self._show_ended(key)
        self._keep_selected(self._row_of(key), choice)
        self._update()  # Download stays off while it runs: a second click would do nothing
        self.started.emit(task_id)
        return task_id

    def _keep_selected(self, row: int | None, choice: GgufChoice) -> None:
        """`choice`'s row selected again if a button's going moved the selection."""
        if row is not None and self.selected_choice() != choice:
            self.files.selectRow(row)

    def _retry_button(self, key: tuple[str, str]) -> QPushButton | None:
        row = self._row_of(key)
        widget = self.files.cellWidget(row, COL_RETRY) if row is not None else None
        return widget if isinstance(widget, QPushButton) else None

    def _row_of(self, key: tuple[str, str]) -> int | None:
        if key[0] != self.repo:
            return None
        return next((r for r, c in enumerate(self.choices) if c.name == key[1]), None)

    def _show_ended(self, key: tuple[str, str]) -> None:
        """The file's row as its download here ended: "✗ download failed" (or cancelled) in
        its On this machine cell, and a Retry button beside it; neither once it runs again."""
        row = self._row_of(key)
        if row is not None:
            choice = self.choices[row]
            cell = self.files.item(row, COL_FIT)
            if cell is not None:  # its first line is the mark, the estimate after it
                estimate = cell.text().split("\n")[-1]
                cell.setText(self._on_disk_mark(choice) + estimate)
            ended = key in self.ended
            if ended and self._retry_button(key) is None:
                button = QPushButton("Retry")
                button.setAutoDefault(False)
                button.setToolTip(
                    "Download it again, as Download does: a failed download continues from "
                    "the bytes it kept on disk."
                )
                button.clicked.connect(
                    lambda _=False, c=choice, r=key[0]: aio.spawn(self.retry(r, c), self)
                )
                self.files.setCellWidget(row, COL_RETRY, button)
            elif not ended and self.files.cellWidget(row, COL_RETRY) is not None:
                self.files.removeCellWidget(row, COL_RETRY)
        shown = any((self.repo, c.name) in self.ended for c in self.choices)
        self.files.setColumnHidden(COL_RETRY, not shown)
        if shown:
            self._room_for_names()
        else:
            self._room_for_repos()

    def _room_for_names(self) -> None:
        """With the Retry column shown, the file names keep their room: the Retry column as
        wide as its button, and the repo list gives the file table what its names lack, down
        to what its own ids need (a name then wraps at its "-", whole). The name was cut to
        "Smo…5M-Inst…gguf" at the dialog's size. What the list gives is noted (`lent`)."""
        header = self.files.horizontalHeader()
        button = next(
            (
                w
                for r in range(self.files.rowCount())
                if isinstance(w := self.files.cellWidget(r, COL_RETRY), QPushButton)
            ),
            None,
        )
        # The button's width, and the grid line the cell gives up to it.
        retry = button.sizeHint().width() + 1 if button is not None else 0
        header.setSectionResizeMode(COL_RETRY, QHeaderView.ResizeMode.Fixed)
        header.resizeSection(COL_RETRY, retry)
        fonts = self.files.fontMetrics()
        names = max((fonts.horizontalAdvance(c.label()) for c in self.choices), default=0)
        others = retry + sum(
            max(self.files.sizeHintForColumn(col), header.sectionSizeHint(col))
            for col in range(1, COL_RETRY)
        )
        frame = self.files.width() - self.files.viewport().width()
        needed = names + 2 * fonts.averageCharWidth() + others + frame
        # The repo list keeps what its ids need (a cut id is no better than a cut name).
        ids = max(
            (
                fonts.horizontalAdvance(self.repos.item(r).text().split("\n")[0])
                for r in range(self.repos.count())
            ),
            default=0,
        )
        keep = max(self.repos.minimumWidth(), ids + 4 * fonts.averageCharWidth())
        sizes = self.split.sizes()
        give = min(needed - sizes[1], sizes[0] - keep)
        if give > 0:
            self.split.setSizes([sizes[0] - give, sizes[1] + give])
            self.lent += give

    def _room_for_repos(self) -> None:
        """No Retry column any more: the repo list has back what it gave for one, and the
        panes are as they were before it (walkH19: the list stayed narrow for good, the file
        table keeping the room its buttons no longer needed)."""
        lent, self.lent = self.lent, 0
        sizes = self.split.sizes()
        if lent > 0 and sum(sizes) > 0:
            self.split.setSizes([sizes[0] + lent, sizes[1] - lent])

    def keep_token(self) -> None:
        token = self.token.text().strip()
        if self.core.keep_hub_token(token or None):
            self.token.clear()
            self._show_token_state()
        else:
            self.status.setText(
                "There is no keyring on this system to keep the token in. Set HF_TOKEN in "
                "the environment LMSP Desktop starts from instead."
            )

    def _show_token_state(self) -> None:
        kept = self.core.hub_token_kept()
        self.token_button.setText("Replace token" if kept else "Keep token")
        self.token.setPlaceholderText(
            "A token is kept in the keyring (type a new one to replace it, or keep it empty "
            "to forget it)"
            if kept
            else "Hugging Face token, for gated or private repos (kept in the keyring)"
        )

    def _update(self) -> None:
        choice = self.selected_choice()
        self.download_button.setEnabled(
            choice is not None and (self.repo, choice.name) not in self.downloading
        )
        if choice is not None and (self.repo, choice.name) not in self.estimating:
            self.estimating.add((self.repo, choice.name))
            aio.spawn(self.estimate(self.repo, choice), self)
        if choice is not None:
            self._describe(choice)

    def _describe(self, choice: GgufChoice) -> None:
        """The status line speaks of the file selected now (it kept the last repo's listing
        or an earlier download's line), with what its estimate said."""
        if (self.repo, choice.name) in self.downloading:
            # Said until another file is picked: an estimate answering after the click
            # replaced it, and the dialog looked as if Download had done nothing.
            self.status.setText(
                f"Downloading {choice.name}: follow it in the Tasks table (Cancel works there)."
            )
            return
        ended = self.ended.get((self.repo, choice.name))
        if ended is not None and ended[0] == "failed" and choice.name not in self.on_disk:
            # Why, in the error's own sentences (a cancel was the user's doing: its row's mark
            # and Retry say enough, and the file is described as before).
            why = ended[1] if not ended[1] or ended[1].endswith(".") else f"{ended[1]}."
            self.status.setText(
                f"The download of {choice.name} failed. {why + ' ' if why else ''}Retry (in "
                "its row) downloads it again, continuing from the bytes kept."
            )
            return
        note = self.fit_notes.get((self.repo, choice.name), "checking what it needs…")
        local = self.local_copies.get(choice.name)
        if choice.name in self.on_disk:
            fetch = "It is downloaded already (Models page); Download checks it against the hub."
        elif local is not None:
            fetch = (
                f"The same file (its sha256 is the hub's) is already on this machine: the "
                f"model {local.id} ({_source_words(local)} copy, {local.path}). Use it from "
                "the Models page, no download needed; Download would fetch a second copy."
            )
        else:
            fetch = "Download fetches it into the Hugging Face cache, shared with other tools."
        self.status.setText(f"{choice.label()} ({human_size(choice.size)}): {note} {fetch}")

    def _on_disk_mark(self, choice: GgufChoice) -> str:
        # Its own line: beside the estimate it made the column squeeze the file's name.
        key = (self.repo, choice.name)
        if key in self.downloading:
            return f"{WAITING if key in self.waiting else DOWNLOADING}\n"
        if choice.name in self.on_disk:
            return "✓ downloaded\n"
        # A copy here wins over how a download of it ended: the file is on this machine
        # (the status line says so), a cancel or a failure changed nothing of that.
        local = self.local_copies.get(choice.name)
        if local is not None:  # under the column's title, "On this machine"
            return f"✓ {_source_words(local)} copy\n"
        ended = self.ended.get(key)
        if ended is not None:
            return f"✗ download {ended[0]}\n"
        return ""

    async def estimate(self, repo: str, choice: GgufChoice) -> None:
        """Fill the file's "On this machine" cell: the memory plan from its header on the
        hub, as the Models page shows for a local model."""
        key = (repo, choice.name)
        row = self._row_of(key)
        cell = self.files.item(row, COL_FIT) if row is not None else None
        if cell is not None:
            cell.setText(self._on_disk_mark(choice) + "memory: checking…")
        plan = await self.core.hub_memory_plan(repo, choice)
        if plan is None:
            note = "no memory estimate: its GGUF header could not be read from the hub."
            self.fit_cells[key] = ("unknown: header unreadable", note, None)
        else:
            note = plan.reason or "fits the memory free now, with the default settings."
            words = (
                f"{FIT_WORDS[plan.fit]} · {gib(plan.estimate.total)} "  # as the Models page
                f"at {plan.context_length:,} tokens"  # and the CLI say it
            )
            self.fit_cells[key] = (words, note, FIT_COLORS[plan.fit])
        self.fit_notes[key] = note[:1].lower() + note[1:]
        self._paint_estimate(key)  # in its row wherever it is now (the list may be new)
        if repo == self.repo and self.selected_choice() == choice:
            self._describe(choice)

    def _paint_estimate(self, key: tuple[str, str]) -> None:
        """The file's estimate, if known, in its row's cell under its mark."""
        row, found = self._row_of(key), self.fit_cells.get(key)
        cell = self.files.item(row, COL_FIT) if row is not None else None
        if cell is None or found is None or row is None:
            return
        words, note, color = found
        cell.setText(self._on_disk_mark(self.choices[row]) + words)
        cell.setToolTip(note)
        if color is not None:
            cell.setForeground(QColor(color))


def _forget(core: CoreApi, dialog: DownloadDialog, *_: object) -> None:
    core.unsubscribe(dialog)


def _source_words(model: ModelInfo) -> str:
    return SOURCE_WORDS.get(model.source, model.source)


def _row_named(choices: list[GgufChoice], selector: str) -> int | None:
    """The row of the choice a file name or a quant names (as a pull picks it), if one."""
    wanted = selector.lower()
    for row, choice in enumerate(choices):
        names = {f.name.lower() for f in choice.files} | {choice.name.rsplit("/", 1)[-1].lower()}
        if wanted in names or f"{wanted}.gguf" in names:
            return row
    quants = [row for row, c in enumerate(choices) if (c.quant or "").lower() == wanted]
    return quants[0] if len(quants) == 1 else None
