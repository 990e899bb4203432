"""The lower half of the Tasks page: one task's header, live output, events and request."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from lmsp_desktop.core.engines.llama_chat import PREFILL
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import CANCELLABLE, TERMINAL, EventType, TaskState
from lmsp_desktop.core.views import TaskChange, TaskRow
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import (
    STATE_COLOURS,
    clock,
    human_duration,
    state_word,
    why_incomplete,
)
from lmsp_desktop.gui.models.base import Index
from lmsp_desktop.gui.models.event_table import (
    COL_DATA,
    COL_TYPE,
    EventTableModel,
    download_progress,
)
from lmsp_desktop.gui.models.event_table import Role as EventRole
from lmsp_desktop.gui.models.task_table import FirstStarts, ran_from
from lmsp_desktop.gui.pages.details_header import DetailsHeader, Fact
from lmsp_desktop.gui.pages.earlier_run import EarlierRuns, with_earlier

CURSOR = "▌"
DELTA = str(EventType.OUTPUT_TEXT_DELTA)
NOTHING_SELECTED = "The selected task's output appears here."


DOWNLOAD_OUTPUT = {
    TaskState.RUNNING: "A download writes a file, not text: its progress, speed and time left "
    "are in the task table; the file lands in the Hugging Face cache.",
    TaskState.COMPLETED: "Downloaded: the model is listed on the Models page.",
    TaskState.CANCELLED: "Download cancelled. Retry (above) starts it again.",
    TaskState.FAILED: "The download failed. Retry (above) continues from the bytes it kept.",
}


# A download's lifecycle events in download words (Type, Data): the stored types are the
# API's, shared with generations ("response.cancelling", "status=in_progress
# state=cancelling" sat between readable download.progress rows); the stored type stays in
# the Type cell's tooltip and in the JSONL export.
# type → (label, words, words with the bytes of the progress event just before it)
DOWNLOAD_EVENTS = {
    EventType.CREATED: ("download created", "the file's download was asked for", ""),
    EventType.QUEUED: ("download queued", "waits for a free download slot", ""),
    EventType.IN_PROGRESS: ("download started", "fetching the file from the hub", ""),
    EventType.RESUMED: (
        "download resumed",
        "going on after the restart",
        "going on after the restart, from {at}",
    ),
    EventType.CANCELLING: ("cancelling…", "stopping the transfer", "stopping the transfer at {at}"),
    EventType.CANCELLED: (
        "download cancelled",
        "stopped; its partial file is removed",
        "stopped at {at}; its partial file is removed",
    ),
    EventType.COMPLETED: (
        "download completed",
        "the file is whole; listed on the Models page",
        "",
    ),
    EventType.FAILED: ("download failed", "", ""),
}


class TaskEvents(EventTableModel):
    """The shown task's events; a download's lifecycle events labelled as a download's."""

    download = False  # the shown task is a download (set once its row is read)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        shown = super().data(index, role)
        if not self.download or index.column() not in (COL_TYPE, COL_DATA):
            return shown
        etype = str(super().data(self.index(index.row(), COL_TYPE)))
        if etype == EventType.DOWNLOAD_PROGRESS and index.column() == COL_TYPE:
            # Labelled like the lifecycle rows around it; its Data already reads as bytes.
            if role == Qt.ItemDataRole.ToolTipRole:
                return f"Stored (and exported) as {etype}"
            return "progress" if role == Qt.ItemDataRole.DisplayRole else shown
        words = DOWNLOAD_EVENTS.get(etype)  # type: ignore[call-overload]
        if words is None:
            return shown
        if role == Qt.ItemDataRole.ToolTipRole and index.column() == COL_TYPE:
            return f"Stored (and exported) as {etype}"
        if role != Qt.ItemDataRole.DisplayRole:
            return shown
        if index.column() == COL_TYPE:
            return words[0]
        if etype == EventType.FAILED:  # the reason, as the generic summary has it
            return str(shown).partition(" error=")[2] or str(shown)
        at = self._bytes_before(index.row()) if words[2] else ""
        return words[2].format(at=at) if at else words[1]

    def _bytes_before(self, row: int) -> str:
        """The bytes of the progress event just before a lifecycle event (a few rows up)."""
        for above in range(row - 1, max(-1, row - 4), -1):
            stored = super().data(self.index(above, COL_TYPE))  # the type, not its label
            if stored == EventType.DOWNLOAD_PROGRESS:
                event = self.index(above, 0).data(EventRole.JSON) or {}
                return download_progress({**event, "bytes_per_s": None, "retry_at": None})
        return ""


def is_download(row: Any) -> bool:
    return "kind" in row.keys() and row["kind"] == "download"  # noqa: SIM118


def is_embedding(row: Any) -> bool:
    return "kind" in row.keys() and row["kind"] == "embedding"  # noqa: SIM118


def embedding_output(row: Any) -> str:
    """What an embedding made, as its Output tab says it (vectors, not text: "No output
    yet." stood under a completed one): "2 embeddings of 576 dimensions, 6 input tokens"."""
    inputs = json.loads(row["request"]).get("input")
    n = len(inputs) if isinstance(inputs, list) else 1
    texts = f"{n} input{'' if n == 1 else 's'}"
    state = row["state"]
    if state == TaskState.COMPLETED:
        keys = row.keys()
        dims = row["embedding_dimensions"] if "embedding_dimensions" in keys else None
        made = f"{n} embedding{'' if n == 1 else 's'}"
        if dims:
            made += f" of {dims:,} dimensions"
        tokens = row["input_tokens"] or 0
        return (
            f"{made}, {tokens:,} input token{'' if tokens == 1 else 's'}. An embedding "
            "makes vectors, not text: the client that asked received them."
        )
    if state == TaskState.CANCELLED:
        return f"No embeddings: cancelled before its {texts} were read."
    if state in (TaskState.QUEUED, TaskState.LOADING):
        return f"Waiting to embed {texts}; an embedding makes vectors, not text."
    return f"Embedding {texts}: an embedding makes vectors, not text."


def empty_output_reason(row: Any) -> str:
    """What the Output tab says while a task has no text: why, not just "no output"."""
    state = row["state"]
    error = json.loads(row["error"]) if row["error"] else None
    if state == TaskState.FAILED and error:
        return f"No output: the task failed ({error['code']}). {error['message']}"
    if is_embedding(row):
        return embedding_output(row)
    if is_download(row):  # writes a file, not text: "the model wrote" would be wrong words
        return DOWNLOAD_OUTPUT.get(state, DOWNLOAD_OUTPUT[TaskState.RUNNING])
    if state == TaskState.CANCELLED and row["started_at"] is None:
        return (
            "No output: cancelled while it waited in the queue or for its model to load, "
            "before it started."
        )
    if state == TaskState.CANCELLED:
        return "No output: cancelled before the model wrote anything."
    if state == TaskState.QUEUED:
        return "Waiting in the queue; the output appears here as the model writes it."
    if state == TaskState.LOADING:
        return "Loading the model; the output appears here as the model writes it."
    return "No output yet."  # shown after the text while the model is still generating


def output_shown(row: Any) -> str:
    """The output as the Output tab shows it: the text (structured output as indented JSON
    once it parses), then each function call the model made as `→ name(arguments)`, its
    arguments indented when they are more than one short line."""
    text = text_shown(row["output_text"], structured(row))
    lines = [f"→ {c['name']}({_indented(c['arguments'], short=60)})" for c in function_calls(row)]
    return "\n".join([text, *lines] if text else lines) if lines else text


def function_calls(row: Any) -> list[dict[str, Any]]:
    raw = row["output_items"] if "output_items" in row.keys() else None  # noqa: SIM118
    return [i for i in json.loads(raw or "[]") if i.get("type") == "function_call"]


def structured(row: Any) -> bool:
    """The task asked for JSON output (shown indented once it parses)."""
    fmt = (json.loads(row["request"]).get("text_format") or {}).get("type")
    return fmt in ("json_object", "json_schema")


def text_shown(text: str, structured: bool) -> str:
    """The model's text as the Output tab shows it."""
    return _indented(text) if text and structured else text


def _indented(text: str, short: int = 0) -> str:
    """JSON text indented for reading (kept as it is while incomplete or invalid, and when
    it fits on one line of `short` characters)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    compact = json.dumps(value, ensure_ascii=False)
    if len(compact) <= short:
        return compact
    return json.dumps(value, indent=2, ensure_ascii=False)


_SAMPLING = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "max_output_tokens",
    "seed",
    "stop",
)


# Tasks stored before requests named their API themselves (`via`).
_API_NAMES = {
    "responses": "Responses (POST /v1/responses)",
    "chat.completions": "Chat Completions (POST /v1/chat/completions)",
}


def request_shown(request: dict[str, Any]) -> str:
    """What the Request tab shows: what the client sent (its input as sent, tools by name,
    the output format and sampling settings), not the internal shape the task runs from."""
    chat = request.get("api", "responses") != "responses"  # no input items: its messages
    api = str(request.get("api") or "responses")
    lines = [request.get("via") or _API_NAMES.get(api, f"{api} API")]
    if request.get("model"):
        lines.append(f"Model: {request['model']}")
    if request.get("previous_response_id"):
        lines.append(f"Continues: {request['previous_response_id']}")
    if request.get("instructions"):
        lines += ["", "Instructions:", str(request["instructions"])]
    sent = request.get("messages") if chat else request.get("input_items")
    if sent is None:  # a task created before `input_items` was kept
        sent = request.get("input", request.get("messages"))
    if chat and isinstance(sent, list):  # the engine's mark on a prefill is not the client's
        sent = [_without_prefill_mark(m) for m in sent]
    lines += ["", "Messages:" if chat else "Input:", json.dumps(sent, indent=2, ensure_ascii=False)]
    tools = [t.get("name", "?") for t in request.get("tools") or []]
    if tools or request.get("dropped_tools"):
        lines += ["", "Tools: " + (", ".join(tools) or "none")]
        if request.get("tool_choice") not in (None, "auto"):
            lines.append(f"Tool choice: {json.dumps(request['tool_choice'])}")
        if request.get("dropped_tools"):
            lines.append("Not offered (cannot run here): " + ", ".join(request["dropped_tools"]))
    fmt = request.get("text_format") or {"type": "text"}
    described = fmt.get("type", "text")
    if fmt.get("name"):
        described += f" ({fmt['name']})"
    lines += ["", ("Response format: " if chat else "Text format: ") + described]
    if fmt.get("schema") is not None:
        lines.append(json.dumps(fmt["schema"], indent=2, ensure_ascii=False))
    sampling = [
        f"{name} {json.dumps(request[name])}"
        for name in _SAMPLING
        if request.get(name) not in (None, [])
    ]
    if sampling:
        lines += ["", "Sampling: " + " · ".join(sampling)]
    flags = [name for name in ("stream", "background") if request.get(name)]
    flags.append("stored" if request.get("store", True) else "not stored")
    lines.append("Delivery: " + ", ".join(flags))
    if request.get("metadata"):
        lines.append("Metadata: " + json.dumps(request["metadata"], ensure_ascii=False))
    if request.get("on_restart"):
        lines.append(f"If the service restarts: {request['on_restart']}")
    for note in request.get("notes") or []:
        lines.append(f"Note: {note}")
    return "\n".join(lines)


def _without_prefill_mark(message: Any) -> Any:
    if isinstance(message, dict) and PREFILL in message:
        return {k: v for k, v in message.items() if k != PREFILL}
    return message


class TaskDetails(QWidget):
    """Shows the selected task and follows it live; offers Copy id, Cancel and Export."""

    cancel_requested = Signal(list)  # [task_id]
    retried = Signal(str)  # the download task Retry started (or joined)

    def __init__(self, core: CoreApi, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.core = core
        self.task_id: str | None = None
        self.state: str | None = None
        self._output = ""
        # The last event whose text the Output tab shows, while new text deltas can simply
        # be appended to it (a generating task whose output is shown as written); None
        # otherwise. A streaming task's pane re-read the whole task (its text, request,
        # items) and re-laid its header out for every flush of a few tokens.
        self._text_seq: int | None = None
        self._text = ""  # the task's text up to `_text_seq`, as the model wrote it
        self._structured = False  # shown indented once it parses (JSON output)
        self._before_text = ""  # what the Output tab shows before it (an earlier run's)
        # Reads of the shown task and appends of its text, one at a time in the order they
        # were asked for (an append joins the text where the last one left it).
        self._reading = asyncio.Lock()
        self._busy = 0  # reads asked for and not finished
        self._heard_seq = 0  # the shown task's last event heard of (the Events tab's aim)
        self._row: Any = None  # the shown task as last read
        self._ended: TaskRow | None = None  # its list row, when the restart ended it
        # A restarted task's first start, read once per task (the table's rule and reads).
        self._first_starts = FirstStarts(core, keep=256)
        self._first_started: float | None = None  # the shown task's
        # The output of the run before the last start-over, read once per task and restart.
        self._earlier = EarlierRuns(core)
        # Two lines always (a failure's reason takes the second): the tabs below stay put
        # from one selected task to the next.
        self.header = DetailsHeader("Select a task to see its output and events.")
        self.copy_button = QPushButton("Copy id")
        self.copy_button.clicked.connect(self.copy_id)
        metrics = self.copy_button.fontMetrics()  # as wide as "Copied ✓": the header stays put
        grow = metrics.horizontalAdvance("Copied ✓") - metrics.horizontalAdvance("Copy id")
        self.copy_button.setMinimumWidth(self.copy_button.sizeHint().width() + max(0, grow))
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop this task; its output so far is kept")
        self.cancel_button.clicked.connect(
            lambda: self.cancel_requested.emit([self.task_id] if self.task_id else [])
        )
        # A failed or cancelled download's Retry, as the Download dialog's row has it: the
        # same pull (core.pull_model) the dialog's Download and Retry make.
        self.retry_button = QPushButton("Retry")
        self.retry_button.setToolTip(
            "Download the file again (a failed download continues from the bytes it kept)"
        )
        self.retry_button.clicked.connect(lambda: aio.spawn(self.retry(), self))
        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        top.addWidget(self.copy_button)
        top.addWidget(self.retry_button)
        top.addWidget(self.cancel_button)

        self.output = QPlainTextEdit(readOnly=True)
        # Nobody undoes a read-only view: its undo stack kept every append of a stream.
        self.output.setUndoRedoEnabled(False)
        self.output.setPlaceholderText(NOTHING_SELECTED)
        self.events = TaskEvents(core, parent=self)
        self.events_view = QTableView()
        self.events_view.setModel(self.events)
        self.events_view.setTabKeyNavigation(False)  # Tab leaves it; the arrows move within
        self.events_view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.events_view.verticalHeader().hide()
        self.events_view.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        self.events_view.horizontalHeader().setSectionResizeMode(
            COL_DATA, QHeaderView.ResizeMode.Stretch
        )
        self.events_view.setWordWrap(False)
        for col, width in ((0, 60), (1, 110), (2, 250)):
            self.events_view.setColumnWidth(col, width)
        # Follow the tail through the scroll bar itself: its range changes after rows are
        # laid out (and when the hidden Events tab first gets its real size), which is when
        # "at the bottom" has to be restored; scrolling to the bottom also makes the view
        # fetch the next page of a long task, so the last page is never left unread.
        self._at_bottom = True
        bar = self.events_view.verticalScrollBar()
        bar.valueChanged.connect(self._remember_bottom)
        bar.rangeChanged.connect(self._follow_tail)
        self.export_button = QPushButton("Export JSONL…")
        self.export_button.clicked.connect(self._ask_export_path)
        self.events_tab = events_tab = QWidget()
        events_layout = QVBoxLayout(events_tab)
        events_layout.setContentsMargins(0, 0, 0, 0)
        events_layout.addWidget(self.events_view)
        row = QHBoxLayout()
        self.events_hint = QLabel("Follows new events while scrolled to the bottom.")
        row.addWidget(self.events_hint, 1)
        row.addWidget(self.export_button)
        events_layout.addLayout(row)
        self.request = QPlainTextEdit(readOnly=True)

        self.tabs = QTabWidget()
        self.tabs.addTab(self.output, "Output")
        self.tabs.addTab(events_tab, "Events")
        self.tabs.addTab(self.request, "Request")
        self.tabs.currentChanged.connect(self._events_caught_up)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.tabs)
        self._set_buttons()

    # -- showing a task ----------------------------------------------------------------------
    def display(self, task_id: str | None) -> asyncio.Task[None] | None:
        """Show `task_id` (None: nothing). Takes effect at once: the pane's task id, header
        and buttons change now, so a later call always wins over a load still running."""
        if task_id == self.task_id:
            return None
        self.task_id = task_id
        self.state = None
        self._output = ""
        self._text_seq = None
        self._heard_seq = 0
        self.output.clear()
        self.request.clear()
        self._at_bottom = True
        self._set_buttons()
        if task_id is None:
            self.header.show_plain("Select a task to see its output and events.")
            self._set_placeholder(NOTHING_SELECTED)
        else:
            self._set_placeholder("")  # never another task's reason, even for a moment
            self.header.show_plain(f"<b>{task_id}</b> …")
        return aio.spawn(self._load(task_id), self)

    async def show_task(self, task_id: str | None) -> None:
        """`display` and wait until the task is loaded."""
        loading = self.display(task_id)
        if loading is not None:
            await loading

    async def _load(self, task_id: str | None) -> None:
        await self.events.show_task(task_id)
        if task_id is None or task_id != self.task_id:
            return
        await self.refresh()
        if self.task_id == task_id:
            self.request.setPlainText(request_shown(json.loads(self._row["request"])))

    async def refresh(self) -> None:
        """Re-read the shown task (its state, output and new events)."""
        self._busy += 1  # a flush meanwhile waits for it: it may be older than the read
        try:
            async with self._reading:
                await self._reread()
        finally:
            self._busy -= 1

    async def _reread(self) -> None:
        task_id = self.task_id
        if task_id is None:
            return
        try:
            row = await self.core.task(task_id)
        except LmspError:  # deleted meanwhile (retention)
            return
        if task_id != self.task_id:
            return
        ended: TaskRow | None = None
        if row["recovered_boot"] is not None and row["state"] in TERMINAL:
            # Perhaps ended by the restart: how long it ran is the list row's (its last
            # event before the stop), not its finish at the restart's time.
            listed = await self.core.tasks_by_id([task_id])
            if task_id != self.task_id:
                return
            ended = listed[0] if listed and listed[0].ended_by_restart else None
        first_start: float | None = None
        if row["restarts"] and row["started_at"] is not None:
            first_start = await self._first_starts.read(task_id)
            if task_id != self.task_id:
                return
        self._row, self._ended, self._first_started = row, ended, first_start
        self.state = row["state"]
        download = is_download(row)
        if self.events.download != download:
            self.events.download = download
            if self.events.rowCount():
                self.events.dataChanged.emit(
                    self.events.index(0, COL_TYPE),
                    self.events.index(self.events.rowCount() - 1, COL_DATA),
                )
        self._show_header(row)
        self._set_placeholder(empty_output_reason(row))
        if row["state"] == TaskState.QUEUED and not is_download(row):
            checking = await self._model_being_checked(row["model"])
            if task_id != self.task_id:
                return
            if checking:
                self._set_placeholder(
                    f"Waiting for the digest check of {row['model']} to finish (Models page: "
                    "hashing); the task starts then."
                )
        generating = row["state"] == TaskState.RUNNING and not is_download(row)
        earlier = ""
        if row["restarts"]:
            earlier = await self._earlier.text(task_id, row["restarts"])
            if task_id != self.task_id:
                return
        shown = output_shown(row)
        whole = with_earlier(row, earlier, shown)
        self._show_output(whole, generating)
        # Text is appended while it ends the Output tab (no function call after it).
        appendable = generating and not function_calls(row)
        self._text_seq = row["last_seq"] if appendable else None
        self._text, self._structured = row["output_text"], structured(row)
        self._before_text = whole.removesuffix(shown)
        self._set_buttons()
        await self.events.follow(row["last_seq"])

    async def _model_being_checked(self, model_id: str) -> bool:
        """Whether a queued task's model is still being hashed: the queue waits for it (a
        task looked stuck at "Waiting in the queue" with nothing else running)."""
        for info in await self.core.models():
            if info.id == model_id:
                return info.state in ("hashing", "unverified")
        return False

    def tick(self) -> None:
        """The window's clock: a running task's "ran …" moves on even while nothing arrives
        to refresh it (a long prompt being read, a stalled upstream); it stood still."""
        row = self._row
        if row is not None and row["id"] == self.task_id and self.state == TaskState.RUNNING:
            self._show_header(row)

    def on_changes(self, changes: dict[str, TaskChange]) -> None:
        """A flush of the window's bridge: text deltas of the shown task are appended to its
        output (from the change itself when it carries every one since the last shown, else
        read as events); anything else (a state, an item, a tool call) re-reads the task."""
        change = changes.get(self.task_id) if self.task_id is not None else None
        if change is None:
            return
        if not self._busy and self._append_carried(change):
            self._follow_events(change.last_seq)
            return
        self._busy += 1  # from now: a later flush must not append before this read ends
        aio.spawn(self._follow(change), self)

    def _only_text(self, change: TaskChange) -> bool:
        """The change only added text to the shown generating task, and the pane appends."""
        return (
            self._text_seq is not None
            and change.task_id == self.task_id
            and change.state == TaskState.RUNNING == self.state
            and bool(change.event_types)
            and all(t == DELTA for t in change.event_types)
        )

    def _append_carried(self, change: TaskChange) -> bool:
        """Append the deltas the change carries; False when they do not join the shown text
        (the bridge keeps only the last commit's events of a flush) or it is not text."""
        if not self._only_text(change) or self._text_seq is None:
            return False
        if change.last_seq <= self._text_seq:
            return True  # already shown (read with the task)
        events = change.events
        if not events or events[0]["sequence_number"] > self._text_seq + 1:
            return False
        if events[-1]["sequence_number"] != change.last_seq:
            return False
        self._append_deltas(events)
        return True

    async def _follow(self, change: TaskChange) -> None:
        """After the reads before it: append the deltas committed since the shown text (read
        as events), or re-read the task when it is not only text that changed."""
        try:
            async with self._reading:
                if change.task_id != self.task_id:
                    return
                if not (self._only_text(change) and await self._read_deltas(change.last_seq)):
                    await self._reread()
        finally:
            self._busy -= 1

    async def _read_deltas(self, last_seq: int) -> bool:
        """Append the text deltas up to `last_seq` after the shown text; False when another
        event is among them (the task must be re-read)."""
        task_id, since = self.task_id, self._text_seq
        if task_id is None or since is None:
            return False
        if last_seq > since:
            rows = await self.core.task_event_rows(task_id, since, last_seq - since)
            if task_id != self.task_id or since != self._text_seq:
                return True  # another task shown meanwhile: nothing of this one to show
            if any(r["type"] != DELTA for r in rows):
                return False
            self._append_deltas([json.loads(r["data"]) for r in rows])
        self._follow_events(last_seq)
        return True

    def _follow_events(self, last_seq: int) -> None:
        """Text deltas reach the Events tab while it is shown; hidden behind the Output tab
        it catches up when shown (reading and inserting each flush's delta rows there cost
        the window as much CPU as the rest of the pane, for a table nobody looked at)."""
        self._heard_seq = max(self._heard_seq, last_seq)
        if self.tabs.currentWidget() is self.events_tab:
            aio.spawn(self.events.follow(last_seq), self)

    def _events_caught_up(self, _index: int) -> None:
        if self.tabs.currentWidget() is self.events_tab and self._heard_seq > self.events.last_seq:
            aio.spawn(self.events.follow(self._heard_seq), self)

    def _append_deltas(self, events: Sequence[dict[str, Any]]) -> None:
        """Text delta events, the first joining the shown text or before it, appended."""
        since = self._text_seq
        assert since is not None
        fresh = [e for e in events if e["sequence_number"] > since]
        if not fresh:
            return
        self._text += "".join(e["delta"] for e in fresh)
        self._text_seq = fresh[-1]["sequence_number"]
        self._show_output(self._before_text + text_shown(self._text, self._structured), True)

    def _show_header(self, row: Any) -> None:
        error = json.loads(row["error"]) if row["error"] else None
        state = state_word(row["state"])
        if error:
            state += f" ({error['code']})"
        if row["state"] == TaskState.INCOMPLETE:
            limit = json.loads(row["request"]).get("max_output_tokens")
            state += f" — {why_incomplete(row['incomplete_reason'], limit, row['output_tokens'])}"
        facts = [
            Fact(row["id"], bold=True),
            Fact(row["model"]),
            Fact(state, colour=STATE_COLOURS.get(row["state"], "#8c8c8c")),
        ]
        # What a restart would do: nothing to an ended task, so nothing said of it then.
        optional = [] if row["state"] in TERMINAL else [Fact(f"on restart: {row['on_restart']}")]
        ended = self._ended if self._ended is not None and self._ended.id == row["id"] else None
        if ended is not None and row["started_at"] is not None:  # never the downtime
            ran = ended.duration()
            optional.append(
                Fact("ended by the restart" if ran is None else f"ran {human_duration(ran)}")
            )
        elif row["started_at"] is not None:  # the table's Duration steps aside when narrow
            end = row["finished_at"] or time.time()
            # A restarted task from its first start (the downtime between its runs in),
            # as the clock times say: "ran 25 s from 18:57:23", not its last run's 5.8 s.
            began = ran_from(row["started_at"], self._first_started if row["restarts"] else None)
            if began < row["started_at"]:
                optional.append(Fact(f"ran {human_duration(end - began)} from {clock(began)}"))
            else:
                optional.append(Fact(f"ran {human_duration(end - row['started_at'])}"))
        if row["restarts"]:
            optional.append(Fact(f"restarted {row['restarts']}×"))
        # The reason in words on a line of its own, not only in a tooltip.
        second = str(error.get("message") or "") if error else ""
        dropped = json.loads(row["request"]).get("dropped_tools") or []
        if dropped and not second:
            names = ", ".join(dropped)
            second = f"Tools not offered to the model (this service cannot run them): {names}"
        self.header.show_facts(facts, optional, second)

    def _set_placeholder(self, text: str) -> None:
        """Why the Output tab is empty. Qt does not repaint a changed placeholder by itself:
        the old sentence stayed on screen (another task's error, "Waiting in the queue" after
        a cancel), partly overdrawn by the new one."""
        if text != self.output.placeholderText():
            self.output.setPlaceholderText(text)
            self.output.viewport().update()

    def _show_output(self, text: str, generating: bool) -> None:
        shown = text + (CURSOR if generating else "")
        if shown == self._output:
            return
        bar = self.output.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        if self._output.endswith(CURSOR) and shown.startswith(self._output[:-1]):
            # Append only the new text so the reader's scroll position and selection stay.
            # One edit (the cursor mark replaced by the new text and the mark): a line with
            # no break is laid out again whole at each edit, and three edits per flush
            # (move, delete, insert) took ~20 ms on a 50 kB line.
            cursor = QTextCursor(self.output.document())
            cursor.beginEditBlock()
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.movePosition(
                QTextCursor.MoveOperation.PreviousCharacter, QTextCursor.MoveMode.KeepAnchor
            )
            cursor.insertText(shown[len(self._output) - 1 :])
            cursor.endEditBlock()
        else:
            self.output.setPlainText(shown)
        self._output = shown
        if at_bottom:
            bar.setValue(bar.maximum())

    def retryable(self) -> bool:
        """The shown task is a download that failed or was cancelled."""
        row = self._row
        return (
            row is not None
            and row["id"] == self.task_id
            and is_download(row)
            and row["state"] in (TaskState.FAILED, TaskState.CANCELLED)
        )

    async def retry(self) -> str | None:
        """Pull the shown download's file again, as the Download dialog's Retry does; the
        new task is told (`retried`) for the page to select it."""
        if not self.retryable():
            return None
        repo, _, selector = str(self._row["model"]).partition(":")  # as pull named it
        self.retry_button.setEnabled(False)
        try:
            task_id = await self.core.pull_model(repo, selector)
        except LmspError as exc:
            aio.show_error(self, exc)
            return None
        finally:
            self._set_buttons()
        self.retried.emit(task_id)
        return task_id

    def _set_buttons(self) -> None:
        self.copy_button.setEnabled(self.task_id is not None)
        self.retry_button.setVisible(self.retryable())
        self.retry_button.setEnabled(self.retryable())
        self.cancel_button.setEnabled(self.state in CANCELLABLE)
        self.export_button.setEnabled(self.task_id is not None)

    # -- tail following and export -----------------------------------------------------------
    def _remember_bottom(self, value: int) -> None:
        self._at_bottom = value >= self.events_view.verticalScrollBar().maximum()

    def _follow_tail(self, _minimum: int, maximum: int) -> None:
        if self._at_bottom:
            self.events_view.verticalScrollBar().setValue(maximum)

    def copy_id(self) -> None:
        if self.task_id:
            QGuiApplication.clipboard().setText(self.task_id)
            # Said where the eye is, as the Copy URL button does; the timer dies with it.
            button = self.copy_button
            button.setText("Copied ✓")
            QTimer.singleShot(1500, button, lambda: button.setText("Copy id"))

    def _ask_export_path(self) -> None:
        dialog = QFileDialog(self, "Export events as JSON Lines")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setNameFilter("JSON Lines (*.jsonl)")
        dialog.selectFile(f"{self.task_id}.jsonl")
        dialog.fileSelected.connect(lambda path: aio.spawn(self.export(Path(path)), self))
        dialog.open()  # never exec(): the service keeps running on this loop

    async def export(self, path: Path) -> int:
        """Write every event of the shown task, one JSON object per line."""
        events = await self.events.all_events(self.task_id)
        with path.open("w", encoding="utf-8") as out:
            for event in events:
                out.write(json.dumps(event, ensure_ascii=False) + "\n")
        return len(events)
