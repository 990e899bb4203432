"""The tasks table: newest first, paged lazily from the store, patched in place on changes."""

from __future__ import annotations

import bisect
import time
from enum import IntEnum
from typing import Any, ClassVar

from PySide6.QtCore import QModelIndex, Qt, Signal

from lmsp_desktop.core.states import CANCELLABLE, TERMINAL, EventType, TaskState
from lmsp_desktop.core.views import (
    PromptProgress,
    TaskChange,
    TaskFilter,
    TaskRow,
    download_status,
)
from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import (
    clock,
    human_duration,
    human_size,
    incomplete_tip,
    state_icon,
    state_word,
)
from lmsp_desktop.gui.models.base import ROOT, Index, RowTableModel

(
    COL_ID,
    COL_CLIENT,
    COL_MODEL,
    COL_STATE,
    COL_ON_RESTART,
    COL_CREATED,
    COL_DURATION,
    COL_TOKENS,
    COL_TPS,
) = range(9)
HEADERS = [
    "Id",
    "Client",
    "Model",
    "State",
    "On restart",
    "Created",
    "Duration",
    "Output",
    "Speed",
]
SORT_KEYS = {
    COL_ID: "id",
    COL_CLIENT: "client",
    COL_MODEL: "model",
    COL_STATE: "state",
    COL_ON_RESTART: "on_restart",
    COL_CREATED: "created",
    COL_TOKENS: "tokens",
}
DELTA_ONLY = (EventType.OUTPUT_TEXT_DELTA.value,)
PROGRESS_ONLY = (EventType.DOWNLOAD_PROGRESS.value,)  # a download's bytes: no queue moves
RIGHT_ALIGNED = {COL_DURATION, COL_TOKENS, COL_TPS}
DOWN_ARROW = Qt.SortOrder.AscendingOrder  # what QHeaderView draws as ▼ (see sort())


class Role(IntEnum):
    TASK_ID = Qt.ItemDataRole.UserRole + 1
    STATE = Qt.ItemDataRole.UserRole + 2
    CANCELLABLE = Qt.ItemDataRole.UserRole + 3
    # A download's fraction on disk, a prompt's fraction read while it is read, else None.
    PROGRESS = Qt.ItemDataRole.UserRole + 4


class TaskTableModel(RowTableModel):
    """Rows of `TaskRow`; fetches pages of `page_size` as the view scrolls. The task counts
    per state are read with the rows a transition changes and told (`counts_read`) as the
    rows are patched, so the sidebar and status bar never lag the row they count."""

    # dict[str, int]: tasks per state, as of the rows just shown (or newer).
    counts_read = Signal(object)

    headers = HEADERS
    header_tips: ClassVar[dict[int, str]] = {
        COL_ON_RESTART: "What happens to the task if the service restarts before it ends "
        "(nothing once it has ended)",
        COL_DURATION: "How long it has run; for a task a restart put back to work, from its "
        "first start; for a download, the time left while it runs; for a task ended by a "
        "restart, until its last event before the stop",
        COL_TOKENS: "Output tokens generated so far; while a running task's prompt is read, "
        "how far (or that it waits behind another's); for an embedding, the input tokens it "
        "read; for a download, the bytes on disk",
        COL_TPS: "Output tokens per second; for a download, bytes per second",
    }

    # On restart's title when its column is narrower than the title (the page's fitter
    # says: the room went to the Model and the Id first); the whole title is in the tooltip.
    # It follows the room, not the rows: it changed with every run that began or ended.
    SHORT_RESTART_TITLE = "↻"

    def __init__(self, core: CoreApi, page_size: int = 200, parent: Any = None) -> None:
        super().__init__(parent)
        self.core = core
        self.page_size = page_size
        self.filter = TaskFilter()
        self.sort_key, self.descending = "id", True
        self._rows: list[TaskRow] = []
        self._row_of: dict[str, int] = {}
        self._has_more = False
        self._loading = False
        self._generation = 0  # results of loads started before a reload are dropped
        self.loaded = False
        self._counts_asked = 0  # counts reads started, and the latest of them shown
        self._counts_shown = 0
        self.first_starts = FirstStarts(core)  # restarted tasks' first starts (Duration)
        self.short_restart_title = False  # On restart's title as "↻" (set_short_restart_title)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = 0) -> Any:
        if section == COL_ON_RESTART and orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole and self.short_restart_title:
                return self.SHORT_RESTART_TITLE
            if role == Qt.ItemDataRole.ToolTipRole and self.short_restart_title:
                return f"On restart: {self.header_tips[COL_ON_RESTART]}"
        return super().headerData(section, orientation, role)

    def set_short_restart_title(self, short: bool) -> None:
        if short != self.short_restart_title:
            self.short_restart_title = short
            self.headerDataChanged.emit(Qt.Orientation.Horizontal, COL_ON_RESTART, COL_ON_RESTART)

    # -- Qt model API ------------------------------------------------------------------------
    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        row, col = self._rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(row, col)
        if role == Qt.ItemDataRole.DecorationRole and col == COL_STATE:
            return state_icon(row.state)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(row, col)
        if role == Qt.ItemDataRole.TextAlignmentRole and col in RIGHT_ALIGNED:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Role.TASK_ID:
            return row.id
        if role == Role.STATE:
            return row.state
        if role == Role.CANCELLABLE:
            return row.state in CANCELLABLE
        if role == Role.PROGRESS and col == COL_TOKENS:
            reading = self._prompt_read(row)
            if reading is not None:  # no bar while it waits: nothing of it is being read
                if reading.waiting:
                    return None
                return reading.processed / reading.total if reading.total else 0.0
            return row.download_fraction()
        return None

    def _prompt_read(self, row: TaskRow) -> PromptProgress | None:
        """How far a running task's prompt has been read while it is: asked of the core at
        each paint (the tick repaints running rows every second), never stored."""
        if row.state != TaskState.RUNNING or row.kind == "download":
            return None
        return self.core.prompt_progress(row.id)

    def _first_token(self, row: TaskRow) -> float | None:
        """When a running task's output began: the runner's (its end stores it in the row)."""
        if row.finished_at is not None or row.state not in (
            TaskState.RUNNING,
            TaskState.CANCELLING,
        ):
            return None
        return self.core.first_token_at(row.id)

    def _display(self, row: TaskRow, col: int) -> str:
        if col == COL_ID:  # whole: the view cuts it for room, keeping its prefix and end
            return row.id
        if col == COL_CLIENT:
            return row.client
        if col == COL_MODEL:
            return row.model
        if col == COL_STATE:
            return state_word(row.state, row.queue_position)
        if col == COL_ON_RESTART:  # a restart does nothing to an ended task, as its details say
            return "—" if row.state in TERMINAL else row.on_restart
        if col == COL_CREATED:
            return clock(row.created_at)
        if row.kind == "download" and col in (COL_DURATION, COL_TOKENS, COL_TPS):
            return self._download_cell(row, col)
        if col == COL_DURATION:
            return human_duration(self.ran(row))
        if col == COL_TOKENS:
            reading = self._prompt_read(row)
            if reading is not None:  # short, on the cell's bar: its tooltip says the rest
                return prompt_cell(reading, row.output_tokens)
            if row.started_at is None:
                return "—"
            if row.kind == "embedding":  # it reads its input and generates nothing
                # In the Output tab's words ("3 input" read as three inputs, not tokens).
                n = row.input_tokens
                return f"{n:,} input token{'' if n == 1 else 's'}"
            return str(row.output_tokens)
        tps = speed(row, self._first_token(row))  # COL_TPS: the unit says which speed it is
        return f"{tps:.1f} tok/s" if tps is not None else "—"

    def ran(self, row: TaskRow) -> float | None:
        """The Duration: how long it has run, as its details header's "ran" says it: for a
        task a restart put back to work, from its first start (its started_at is its last
        run's: a download resumed after a quit said the 5.8 s since the resume, not the 25 s
        since 18:57:23); for one the restart ended, its run until its last event before."""
        first = self._first_start(row)
        if first is None or row.started_at is None:
            return row.duration()
        return max(0.0, (row.finished_at or time.time()) - ran_from(row.started_at, first))

    def _first_start(self, row: TaskRow) -> float | None:
        """A restarted task's first start, when known (read with its row); else None."""
        if not row.restarts or row.started_at is None or row.ended_by_restart:
            return None
        return self.first_starts.known(row.id)

    async def _read_first_starts(self, rows: list[TaskRow]) -> None:
        """Read the first starts of the restarted tasks among `rows` not read yet (once per
        task: a first start never changes), before their rows are shown."""
        for row in rows:
            if row.restarts and row.started_at is not None and not row.ended_by_restart:
                await self.first_starts.read(row.id)

    def _download_cell(self, row: TaskRow, col: int) -> str:
        """A download shows bytes for tokens, its speed for tok/s, and while it runs the
        time left for its duration."""
        progress = row.progress or {}
        if col == COL_TOKENS:  # as `lmsp-desktop tasks` says it (core/views.py)
            return download_status(row.state, progress) or "—"
        if col == COL_TPS:
            speed = progress.get("bytes_per_s")
            running = row.finished_at is None and row.state == TaskState.RUNNING
            return f"{human_size(speed)}/s" if speed and running else "—"
        left = row.seconds_left() if row.state == TaskState.RUNNING else None
        if left is not None:
            return f"{human_duration(left)} left"
        return human_duration(self.ran(row))

    def _tooltip(self, row: TaskRow, col: int) -> str | None:
        if col == COL_ID:
            return row.id
        if col in (COL_CLIENT, COL_MODEL):  # elided in a narrow window
            return self._display(row, col)
        if col == COL_TOKENS and (reading := self._prompt_read(row)) is not None:
            if row.output_tokens:  # resumed after a restart, as the CLI says it
                doing = "waits to resume" if reading.waiting else "resumes"
                return (
                    f"Resumed after a restart: this task {doing}. The model reads its prompt "
                    f"and the {row.output_tokens:,} tokens it made before again, then goes on "
                    "from there."
                )
            if reading.waiting:
                return (
                    "Waiting behind another task's prompt read: this task's prompt "
                    f"({reading.total:,} tokens) is read once that one is. Output begins "
                    "once its own prompt is read."
                )
            return (
                f"The model is reading the prompt: {reading.total:,} tokens "
                f"({reading.processed:,} read so far), {reading.cached:,} of them reused from "
                "the prompt cache. Output begins once it is read."
            )
        reason = (row.progress or {}).get("retry_reason")  # a download waiting for the hub
        if col == COL_TOKENS and row.state == TaskState.RUNNING and reason:
            return f"{reason} Cancel stops it."  # the reason says when it retries
        if col == COL_ON_RESTART and row.state in TERMINAL:
            return f"Ended: a restart leaves it as it is (its policy was {row.on_restart})."
        if col == COL_STATE and row.error:
            return f"{row.error.get('code')}: {row.error.get('message')}"
        if col == COL_STATE and row.state == TaskState.INCOMPLETE:
            return incomplete_tip(row.incomplete_reason, row.output_limit, row.output_tokens)
        if col == COL_DURATION and row.ended_by_restart and row.started_at is not None:
            if row.ran_until is None:
                return "Ended by the restart: how long it ran before the stop is not known."
            return (
                f"Ended by the restart: it ran until {clock(row.ran_until)}, its last event "
                "before the stop (the downtime up to the restart is not counted)."
            )
        first = self._first_start(row) if col == COL_DURATION else None
        if first is not None and row.started_at is not None and first < row.started_at:
            times = "once" if row.restarts == 1 else f"{row.restarts} times"
            return (
                f"From its first start at {clock(first)}: a restart put it back to work "
                f"{times}, and the time between its runs is counted."
            )
        if col == COL_TPS and row.kind != "download":
            return speed_tip(row, self._first_token(row))
        return None

    def canFetchMore(self, parent: Index = ROOT) -> bool:
        return not parent.isValid() and self._has_more and not self._loading

    def fetchMore(self, parent: Index = ROOT) -> None:
        if self.canFetchMore(parent):
            self._loading = True
            aio.spawn(self._fetch_page(self._generation))

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        key = SORT_KEYS.get(column)
        # Qt draws AscendingOrder as a down arrow (SortDown) and DescendingOrder as an up
        # one; people read ▼ as "largest, newest first" and ▲ as "A to Z, oldest first".
        # So the header's order is read the other way round: ▼ on Created is newest first.
        descending = order == DOWN_ARROW
        if key is None or (key, descending) == (self.sort_key, self.descending):
            return
        self.sort_key, self.descending = key, descending
        aio.spawn(self.reload())

    # -- reading -----------------------------------------------------------------------------
    def task_id(self, row: int) -> str:
        return self._rows[row].id

    def row_of(self, task_id: str) -> int | None:
        return self._row_of.get(task_id)

    def task(self, task_id: str) -> TaskRow | None:
        row = self._row_of.get(task_id)
        return None if row is None else self._rows[row]

    async def set_filter(self, flt: TaskFilter) -> None:
        self.filter = flt
        await self.reload()

    async def reload(self) -> None:
        """Drop the rows and load the first page (a reset: filter, sort or first open)."""
        self._generation += 1
        generation = self._generation
        rows = await self.core.task_page(
            self.filter, 0, self.page_size + 1, self.sort_key, self.descending
        )
        await self._read_first_starts(rows[: self.page_size])
        if generation != self._generation:
            return
        self.beginResetModel()
        self._rows = rows[: self.page_size]
        self._reindex(0)
        self._has_more = len(rows) > self.page_size
        self._loading = False
        self.endResetModel()
        self.loaded = True

    async def _fetch_page(self, generation: int) -> None:
        try:
            rows = await self.core.task_page(
                self.filter,
                len(self._rows),
                self.page_size + 1,
                self.sort_key,
                self.descending,
            )
            await self._read_first_starts(rows[: self.page_size])
        finally:
            if generation == self._generation:
                self._loading = False
        if generation != self._generation:
            return
        self._has_more = len(rows) > self.page_size
        # Tasks inserted at the top since the last page shift offsets: skip what we have.
        fresh = [r for r in rows[: self.page_size] if r.id not in self._row_of]
        if fresh:
            first = len(self._rows)
            self.beginInsertRows(QModelIndex(), first, first + len(fresh) - 1)
            self._rows.extend(fresh)
            self._reindex(first)
            self.endInsertRows()

    def _reindex(self, start: int) -> None:
        if start == 0:
            self._row_of = {}
        for i in range(start, len(self._rows)):
            self._row_of[self._rows[i].id] = i

    # -- live changes ------------------------------------------------------------------------
    async def apply_changes(self, changes: dict[str, TaskChange]) -> None:
        """Re-read changed tasks: patch known rows, insert new ones where they belong."""
        if not self.loaded:
            return
        # Anything but streamed text (a task created, started, ended) may move the queue.
        queue_moved = any(
            c.event_types not in (DELTA_ONLY, PROGRESS_ONLY) for c in changes.values()
        )
        generation = self._generation
        known = [i for i in changes if i in self._row_of]
        if queue_moved:  # queued rows' positions may have moved
            known += [
                r.id for r in self._rows if r.state == TaskState.QUEUED and r.id not in changes
            ]
        new = [i for i in changes if i not in self._row_of]
        updated = await self.core.tasks_by_id(known)
        added = await self.core.tasks_by_id(new, self.filter)
        await self._read_first_starts([*updated, *added])
        # A state moved: the counts, read after the rows (never older than them), are told
        # with the patch, in the same paint (the row said "cancelled" for half a second
        # while the sidebar and status bar, on a timer of their own, said "1 cancelling").
        counts = await self._read_counts() if queue_moved else None
        if generation == self._generation:
            self._patch(updated)
            self._drop_unlisted(updated)
            self._insert(added)
        if counts is not None:
            self._show_counts(*counts)

    async def read_counts(self) -> None:
        """Read the counts per state now and tell them (`counts_read`)."""
        self._show_counts(*await self._read_counts())

    async def _read_counts(self) -> tuple[int, dict[str, int]]:
        self._counts_asked += 1
        asked = self._counts_asked
        return asked, await self.core.task_counts()

    def _show_counts(self, asked: int, counts: dict[str, int]) -> None:
        if asked > self._counts_shown:  # a read that started earlier never wins
            self._counts_shown = asked
            self.counts_read.emit(counts)

    def _patch(self, rows: list[TaskRow]) -> None:
        touched = []
        for fresh in rows:
            i = self._row_of.get(fresh.id)
            if i is not None and fresh != self._rows[i]:
                self._rows[i] = fresh
                touched.append(i)
        self._emit_rows_changed(touched, 0, len(HEADERS) - 1)

    def _drop_unlisted(self, rows: list[TaskRow]) -> None:
        """Rows whose new state the state filter does not list leave the table ("Active"
        kept cancelled tasks)."""
        wanted = self.filter.states
        for fresh in rows:
            i = self._row_of.get(fresh.id)
            if wanted and fresh.state not in wanted and i is not None:
                self.beginRemoveRows(QModelIndex(), i, i)
                del self._rows[i]
                self._reindex(0)
                self.endRemoveRows()

    def _insert(self, rows: list[TaskRow]) -> None:
        default_order = self.sort_key in ("id", "created") and self.descending
        newest = self._rows[0].n if self._rows else -1
        # New tasks are nearly always newer than every row: one insert at the top for all.
        rows = [r for r in rows if r.id not in self._row_of]  # a concurrent flush added it
        top = sorted(
            (r for r in rows if r.n > newest or not default_order), key=lambda r: r.n, reverse=True
        )
        if top:
            self.beginInsertRows(QModelIndex(), 0, len(top) - 1)
            self._rows[0:0] = top
            self._reindex(0)
            self.endInsertRows()
        for fresh in (r for r in rows if default_order and r.n <= newest):
            # An older task that now matches the filter goes where its number puts it.
            at = bisect.bisect_left([-r.n for r in self._rows], -fresh.n)
            if at == len(self._rows) and self._has_more:
                continue  # belongs to a page not loaded yet; fetchMore will bring it
            self.beginInsertRows(QModelIndex(), at, at)
            self._rows.insert(at, fresh)
            self._reindex(0)
            self.endInsertRows()

    def tick(self) -> None:
        """Durations and tok/s of running rows move with the clock."""
        running = [
            i
            for i, r in enumerate(self._rows)
            if r.started_at is not None and r.finished_at is None
        ]
        self._emit_rows_changed(running, COL_DURATION, COL_TPS, [Qt.ItemDataRole.DisplayRole])

    def _emit_rows_changed(
        self,
        rows: list[int],
        first_col: int,
        last_col: int,
        roles: list[Qt.ItemDataRole] | None = None,
    ) -> None:
        """One dataChanged per run of adjacent rows: the smallest ranges that cover them."""
        rows = sorted(rows)
        start = 0
        for k in range(1, len(rows) + 1):
            if k == len(rows) or rows[k] != rows[k - 1] + 1:
                top = self.index(rows[start], first_col)
                bottom = self.index(rows[k - 1], last_col)
                if roles is None:
                    self.dataChanged.emit(top, bottom)
                else:
                    self.dataChanged.emit(top, bottom, roles)
                start = k


class FirstStarts:
    """When restarted tasks first started: their first `response.in_progress` (a task's
    started_at is its last run's start). The one rule the table's Duration and the details
    header's "ran … from 18:57:23" follow; read once per task (a first start never changes),
    the latest `keep` kept."""

    def __init__(self, core: CoreApi, keep: int = 4096) -> None:
        self.core = core
        self.keep = keep
        self._known: dict[str, float | None] = {}

    def known(self, task_id: str) -> float | None:
        return self._known.get(task_id)

    async def read(self, task_id: str) -> float | None:
        if task_id in self._known:
            return self._known[task_id]
        rows = await self.core.task_event_rows(task_id, 0, 64)
        first = next((r["created_at"] for r in rows if r["type"] == EventType.IN_PROGRESS), None)
        if len(self._known) >= self.keep:
            self._known.clear()
        self._known[task_id] = first
        return first


def prompt_cell(reading: PromptProgress, made_before: int = 0) -> str:
    """A running task's Output cell while its prompt is read: "37%" on the cell's bar, or
    "waiting" behind another task's read. As short as the output's count that follows: the
    long form ("reading prompt 3,072/8,192 (37%)", the CLI's) widened the column to 190 px,
    which it kept for the whole run and which the Model column paid for. A task resumed
    after a restart (`made_before` tokens) reads "resuming": the engine reads its prompt and
    then its earlier tokens again, with no report of the latter, so a read's "0%" stood
    there for seconds (the CLI says "resuming" too)."""
    if made_before:
        return "waiting" if reading.waiting else "resuming"
    if reading.waiting:
        return "waiting"
    percent = reading.processed * 100 // reading.total if reading.total > 0 else 0
    return f"{percent}%"


def ran_from(started_at: float, first_start: float | None) -> float:
    """When a task's "ran" begins: its first start when a restart put it back to work since
    (the time between its runs counted, as the clock times say), else its start."""
    return first_start if first_start is not None and first_start < started_at else started_at


def speed(row: TaskRow, first_token_at: float | None = None) -> float | None:
    """The Speed cell's output tokens per second: its run's generation's, from its first
    token (`first_token_at`: the runner's for a running task; TaskRow.tokens_per_second), and
    for a task the recovery ended after a restart, its run before the stop, from what is
    stored: the tokens that run generated over its Duration (to its last event, never the
    downtime up to the restart; a resumed run's from its resume). None only when that cannot
    be known: no output, or none after its start."""
    if not row.ended_by_restart:
        return row.tokens_per_second(first_token_at=first_token_at)
    tokens = row.output_tokens - (row.resumed_tokens if row.resumed_at is not None else 0)
    spent = row.duration()
    return tokens / spent if tokens > 0 and spent else None


def speed_tip(row: TaskRow, first_token_at: float | None = None) -> str | None:
    """The Speed tooltip: what the speed counts, the time to first token and the prompt's
    read speed when known, else that the figure includes the prompt's read."""
    if row.ended_by_restart:
        return ended_speed_tip(row)
    parts = []
    if row.resumed_at is not None:
        parts.append(
            f"The speed of the run resumed at {clock(row.resumed_at)} after a restart: "
            f"{max(0, row.output_tokens - row.resumed_tokens)} tokens since, not counting "
            f"the {row.resumed_tokens} from before it."
        )
    generating = row.generation(first_token_at=first_token_at)
    read = row.prompt_read(first_token_at)
    if generating is not None and read is not None:
        tokens, spent = generating
        waited, read_speed = read
        parts.append(
            f"Generation: {tokens} tokens in {human_duration(spent)} since the first token. "
            f"Time to first token: {human_duration(waited)}"
            + (
                f" (the prompt's {row.input_tokens:,} tokens read at {read_speed:.1f} tok/s)."
                if read_speed is not None
                else "."
            )
        )
    elif speed(row, first_token_at) is not None:
        parts.append(
            "Over the whole run, the prompt's read included: when the first token came is "
            "not known (a task stored before it was kept, or one whose end was not recorded)."
        )
    return " ".join(parts) or None


def ended_speed_tip(row: TaskRow) -> str:
    """The Speed tooltip of a task ended by the restart: what its speed was measured over."""
    if speed(row) is None or row.ran_until is None:
        return "Ended by the restart before its run wrote any output after its start: no speed."
    kept = row.resumed_tokens if row.resumed_at is not None else 0
    return (
        f"Ended by the restart: {row.output_tokens - kept} tokens until its last event before "
        f"the stop, at {clock(row.ran_until)} (the downtime up to the restart is not counted)."
    )
