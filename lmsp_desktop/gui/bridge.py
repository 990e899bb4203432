"""The bridge between core listeners and Qt: collects changes, flushes them on a timer.

Core listeners fire after each commit (tasks) or whenever the registry or pairing manager has
news, possibly many times a millisecond while a model streams tokens. The bridge only marks
what changed and, at most every `interval_ms`, emits one coalesced signal per kind, so the
tables repaint once per flush instead of once per token.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.core.storage.tasks import TaskChange
from lmsp_desktop.gui import core_ops

DELTAS = ("response.output_text.delta",)


class CoreBridge(QObject):
    """Subscribes to the core's listeners and re-emits their news as batched Qt signals."""

    # dict[str, TaskChange]: the latest change of each task since the last flush.
    tasks_changed = Signal(object)
    models_changed = Signal()
    # dict[str, float]: hashing progress per model id, 0.0 to 1.0.
    model_progress = Signal(object)
    pairing_changed = Signal()
    _kick = Signal()

    def __init__(
        self,
        store: Any,
        registry: Any = None,
        pairing: Any = None,
        interval_ms: int = 100,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.store = store
        self.registry = registry
        self.pairing = pairing
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
        store.tasks.listeners.append(self._on_task)
        core_ops.subscribe(registry, self._on_registry)
        core_ops.subscribe(pairing, self._on_pairing)

    def close(self) -> None:
        """Stop listening (the window is going away; the core may live on)."""
        if self._on_task in self.store.tasks.listeners:
            self.store.tasks.listeners.remove(self._on_task)
        core_ops.unsubscribe(self.registry, self._on_registry)
        core_ops.unsubscribe(self.pairing, self._on_pairing)
        self._timer.stop()

    # -- listeners (cheap: record and schedule) ---------------------------------------------
    def _on_task(self, change: TaskChange) -> None:
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
            self._tasks[change.task_id] = dataclasses.replace(change, event_types=kinds)
        self._kick.emit()

    def _on_registry(self, event: Any = None) -> None:
        progress = core_ops.progress_of(event) if event is not None else None
        with self._lock:
            if progress is not None:
                self._progress[progress[0]] = progress[1]
            else:  # a state changed or a scan ended: re-read the list
                self._progress.pop(getattr(event, "model_id", None) or "", None)
                self._models = True
        self._kick.emit()

    def _on_pairing(self, *_: Any) -> None:
        with self._lock:
            self._pairing = True
        self._kick.emit()

    def notify_models(self) -> None:
        """Ask for a models refresh on the next flush (after an action of the GUI itself)."""
        self._on_registry(None)

    @Slot()
    def _start_timer(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    # -- flushing ---------------------------------------------------------------------------
    @Slot()
    def flush(self) -> None:
        with self._lock:
            tasks, self._tasks = self._tasks, {}
            models, self._models = self._models, False
            progress, self._progress = self._progress, {}
            pairing, self._pairing = self._pairing, False
        if tasks:
            self.tasks_changed.emit(tasks)
        if models:  # before progress: a list re-read starting now must not erase it
            self.models_changed.emit()
        if progress:
            self.model_progress.emit(progress)
        if pairing:
            self.pairing_changed.emit()
