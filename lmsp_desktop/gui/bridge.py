"""The bridge between core listeners and Qt: collects changes, flushes them on a timer.

Core listeners fire after each commit (tasks) or whenever the registry or pairing manager has
news, possibly many times a millisecond while a model streams tokens. The bridge only marks
what changed and, at most every `interval_ms`, emits one coalesced signal per kind, so the
tables repaint once per flush instead of once per token.

While the window is hidden (in the tray) nobody looks at the tables: the bridge keeps
recording but does not flush them (Picard's log view does the same), and only tells the tray
that counts moved, at a slow pace. When the window shows again one flush catches up; after
very many changes it asks for a reload instead of patching row by row.
"""

from __future__ import annotations

import dataclasses
import functools
import threading

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from lmsp_desktop.core.models.info import ModelEvent
from lmsp_desktop.core.states import TERMINAL, EventType
from lmsp_desktop.core.views import TaskChange
from lmsp_desktop.gui.core_api import CoreApi

DELTAS = (EventType.OUTPUT_TEXT_DELTA.value,)
HIDDEN_INTERVAL_MS = 2000  # how often the tray hears "counts moved" while the window is hidden
MAX_HIDDEN_CHANGES = 500  # more tasks changed while hidden than this: reload, do not patch


def _forget(core: CoreApi, bridge: CoreBridge, *_: object) -> None:
    if bridge._subscribed:
        bridge._subscribed = False
        core.unsubscribe(bridge)


def progress_of(event: ModelEvent) -> tuple[str, float] | None:
    """(model id, fraction hashed) from a hashing progress event, else None (the event only
    means "the list changed": a state, a scan finished)."""
    if event.kind != "progress" or not event.model_id:
        return None
    total = event.bytes_total or 0
    fraction = event.bytes_done / total if total else 0.0
    return event.model_id, min(fraction, 1.0)


class CoreBridge(QObject):
    """Subscribes to the core's listeners and re-emits their news as batched Qt signals."""

    # dict[str, TaskChange]: the latest change of each task since the last flush.
    tasks_changed = Signal(object)
    models_changed = Signal()
    # Too much changed while hidden to patch: re-read the tasks table.
    tasks_reset = Signal()
    # dict[str, float]: hashing progress per model id, 0.0 to 1.0.
    model_progress = Signal(object)
    # dict[str, str]: model id → unloaded, loading or loaded.
    loaded_changed = Signal(object)
    pairing_changed = Signal()
    # While hidden: tasks changed (the tray's counts), at most every HIDDEN_INTERVAL_MS.
    counts_moved = Signal()
    _kick = Signal()

    def __init__(
        self,
        core: CoreApi,
        interval_ms: int = 100,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.core = core
        self.interval_ms = interval_ms
        self.active = True  # False while the window is hidden
        self._reset = False
        self._loaded: dict[str, str] = {}
        self._lock = threading.Lock()  # registry progress may arrive from a hashing thread
        self._tasks: dict[str, TaskChange] = {}
        self._models = False
        self._progress: dict[str, float | None] = {}
        self._pairing = False
        # Text deltas committed since the start (about one per token): the tokens/s sparkline.
        self.delta_events = 0
        self._seq: dict[str, int] = {}  # the last sequence number heard per unfinished task
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.flush)
        # Queued automatically when emitted from another thread.
        self._kick.connect(self._start_timer)
        self._subscribed = True
        core.subscribe(self)
        # Deleted with its window without close() (a test harness, a crash in a dialog):
        # stop listening, else the core keeps calling into a dead object.
        self.destroyed.connect(functools.partial(_forget, core, self))

    def close(self) -> None:
        """Stop listening (the window is going away; the core may live on)."""
        if self._subscribed:
            self._subscribed = False
            self.core.unsubscribe(self)
        self._timer.stop()

    def set_active(self, active: bool) -> None:
        """Flush to the tables (window shown) or only tell the tray (hidden)."""
        if active == self.active:
            return
        self.active = active
        self._timer.setInterval(self.interval_ms if active else HIDDEN_INTERVAL_MS)
        if active:
            self.flush()  # catch up at once

    # -- listeners (cheap: record and schedule) ---------------------------------------------
    def on_task(self, change: TaskChange) -> None:
        before_seq = self._seq.pop(change.task_id, None)
        if change.event_types == DELTAS and before_seq is not None:
            self.delta_events += max(0, change.last_seq - before_seq)
        elif change.event_types == DELTAS:
            self.delta_events += 1
        if change.state not in TERMINAL:
            self._seq[change.task_id] = change.last_seq
        with self._lock:
            # Keep the latest state but every kind of event since the last flush, so that a
            # start followed by deltas still reads as a transition (queue positions move).
            before = self._tasks.get(change.task_id)
            kinds = change.event_types or ("state",)
            if before is not None:
                kinds = tuple(dict.fromkeys(before.event_types + kinds))
            if self._reset:
                pass  # a reload is due anyway
            elif not self.active and before is None and len(self._tasks) >= MAX_HIDDEN_CHANGES:
                self._reset, self._tasks = True, {}
            else:
                self._tasks[change.task_id] = dataclasses.replace(change, event_types=kinds)
        self._kick.emit()

    def on_model(self, event: ModelEvent | None = None) -> None:
        progress = progress_of(event) if event is not None else None
        with self._lock:
            if progress is not None:
                self._progress[progress[0]] = progress[1]
            else:  # a state changed or a scan ended: re-read the list
                self._progress.pop(event.model_id or "" if event else "", None)
                self._models = True
        self._kick.emit()

    def on_model_loaded(self, model_id: str, state: str) -> None:
        with self._lock:
            self._loaded[model_id] = state
        self._kick.emit()

    def on_pairing(self) -> None:
        with self._lock:
            self._pairing = True
        self._kick.emit()

    def notify_models(self) -> None:
        """Ask for a models refresh on the next flush (after an action of the GUI itself)."""
        self.on_model(None)

    @Slot()
    def _start_timer(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    # -- flushing ---------------------------------------------------------------------------
    @Slot()
    def flush(self) -> None:
        if not self.active:
            with self._lock:
                moved = bool(self._tasks) or self._reset
            if moved:
                self.counts_moved.emit()
            return
        with self._lock:
            tasks, self._tasks = self._tasks, {}
            reset, self._reset = self._reset, False
            models, self._models = self._models, False
            progress, self._progress = self._progress, {}
            loaded, self._loaded = self._loaded, {}
            pairing, self._pairing = self._pairing, False
        if reset:
            self.tasks_reset.emit()
        elif tasks:
            self.tasks_changed.emit(tasks)
        if models:  # before progress: a list re-read starting now must not erase it
            self.models_changed.emit()
        if progress:
            self.model_progress.emit(progress)
        if loaded:
            self.loaded_changed.emit(loaded)
        if pairing:
            self.pairing_changed.emit()
