"""The events of one task: an append-only table, paged in and growing at the tail."""

from __future__ import annotations

import json
from enum import IntEnum
from typing import Any

from PySide6.QtCore import QModelIndex, Qt

from lmsp_desktop.gui import aio
from lmsp_desktop.gui.core_api import CoreApi
from lmsp_desktop.gui.format import clock, human_size, why_incomplete
from lmsp_desktop.gui.models.base import ROOT, Index, RowTableModel

COL_SEQ, COL_TIME, COL_TYPE, COL_DATA = range(4)
HEADERS = ["Seq", "Time", "Type", "Data"]


class Role(IntEnum):
    SEQ = Qt.ItemDataRole.UserRole + 1
    JSON = Qt.ItemDataRole.UserRole + 2


def download_progress(event: dict[str, Any]) -> str:
    """A `download.progress` event (or a download's latest progress) in words: "39.2 MiB of
    98.4 MiB (40%), 4.1 MiB/s", or that it waits for the hub and until when."""
    done = event.get("bytes_done") or 0
    total = event.get("bytes_total") or 0
    text = f"{human_size(done)} of {human_size(total)} ({100 * done // total}%)" if total else ""
    text = text or human_size(done)
    if event.get("retry_at"):
        return f"{text}; waiting for the hub, next try at {clock(event['retry_at'])}"
    speed = event.get("bytes_per_s")
    return f"{text}, {human_size(speed)}/s" if speed else text


def summary(event_type: str, event: dict[str, Any]) -> str:
    """A short, readable gist of an event's data."""
    if event_type == "download.progress":
        return download_progress(event)
    if "delta" in event:
        return repr(event["delta"])
    if "response" in event:
        resp = event["response"]
        task = resp.get("task") or {}
        text = f"status={resp.get('status')} state={task.get('state')}"
        error = resp.get("error")
        if error:  # the reason in words, not only its code (it was only in a tooltip)
            text += f" error={error.get('code')}: {error.get('message')}"
        if resp.get("status") == "incomplete":  # why, as for an error
            reason = (resp.get("incomplete_details") or {}).get("reason")
            tokens = (resp.get("usage") or {}).get("output_tokens") or 0
            words = why_incomplete(reason, resp.get("max_output_tokens"), tokens)
            text += f" reason={reason}: {words}"
        return text
    if "text" in event:
        text = event["text"]
        return f"{len(text)} chars: {text[:60]!r}"
    if "arguments" in event:  # a function call's arguments, complete
        args = str(event["arguments"])
        return args if len(args) <= 80 else args[:79] + "…"
    if "item" in event:
        item = event["item"]
        name = f" {item['name']}()" if item.get("type") == "function_call" else ""
        return f"item {item.get('id')}{name} ({item.get('status')})"
    if "part" in event:
        return f"part {event['part'].get('type')}"
    return ""


class EventTableModel(RowTableModel):
    """Rows (seq, created_at, type, event dict) of the shown task, oldest first."""

    headers = HEADERS

    def __init__(self, core: CoreApi, page_size: int = 500, parent: Any = None) -> None:
        super().__init__(parent)
        self.core = core
        self.page_size = page_size
        self.task_id: str | None = None
        self._rows: list[tuple[int, float, str, dict[str, Any]]] = []
        self._has_more = False
        self._loading = False
        self._generation = 0
        self._wanted = 0  # the newest seq we heard of; loaded once the current load ends

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        seq, created, etype, event = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (str(seq), clock(created, with_ms=True), etype, summary(etype, event))[col]
        if role == Qt.ItemDataRole.ToolTipRole and col == COL_DATA:
            return json.dumps(event, indent=1)[:2000]
        if role == Qt.ItemDataRole.TextAlignmentRole and col == COL_SEQ:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Role.SEQ:
            return seq
        if role == Role.JSON:
            return event
        return None

    @property
    def last_seq(self) -> int:
        return self._rows[-1][0] if self._rows else 0

    async def show_task(self, task_id: str | None) -> None:
        """Switch to another task's events (a reset) and load its first page."""
        if task_id == self.task_id and self._rows:
            return
        self._generation += 1
        self.beginResetModel()
        self.task_id = task_id
        self._rows = []
        self._has_more = False
        self._loading = False
        self._wanted = 0
        self.endResetModel()
        if task_id is not None:
            await self._load(self._generation)

    def canFetchMore(self, parent: Index = ROOT) -> bool:
        return not parent.isValid() and self._has_more and not self._loading

    def fetchMore(self, parent: Index = ROOT) -> None:
        if self.canFetchMore(parent):
            self._loading = True  # at once: views call fetchMore again before the load runs
            aio.spawn(self._load(self._generation))

    async def follow(self, last_seq: int) -> None:
        """New events were committed up to `last_seq`: append them if we hold the tail."""
        self._wanted = max(self._wanted, last_seq)
        if self.task_id is None or last_seq <= self.last_seq:
            return
        if not self._has_more and not self._loading:
            await self._load(self._generation)

    async def _load(self, generation: int) -> None:
        if self.task_id is None:
            return
        self._loading = True
        try:
            rows = await self.core.task_event_rows(self.task_id, self.last_seq, self.page_size + 1)
        finally:
            if generation == self._generation:
                self._loading = False
        if generation != self._generation:
            return
        self._has_more = len(rows) > self.page_size
        fresh = [
            (r["seq"], r["created_at"], r["type"], json.loads(r["data"]))
            for r in rows[: self.page_size]
            if r["seq"] > self.last_seq
        ]
        if fresh:
            first = len(self._rows)
            self.beginInsertRows(QModelIndex(), first, first + len(fresh) - 1)
            self._rows.extend(fresh)
            self.endInsertRows()
        if not self._has_more and self._wanted > self.last_seq and fresh:
            await self._load(generation)  # events committed while this page was read

    async def all_events(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """Every event of a task (default: the shown one), from the store (not only the
        loaded pages)."""
        task_id = task_id or self.task_id
        if task_id is None:
            return []
        events: list[dict[str, Any]] = []
        while True:
            page = await self.core.task_events(
                task_id, events[-1]["sequence_number"] if events else 0, 5000
            )
            events.extend(page)
            if len(page) < 5000:
                return events
