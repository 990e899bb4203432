"""What the runner remembers of engine crashes: per model, when its engine process died,
with what signal, how its unfinished tasks were handled; and which models crashed too often
to be loaded again by themselves (until the user loads them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lmsp_desktop.core.engines.base import EngineCrashed, EngineError
from lmsp_desktop.core.views import RecoveryItem

HOLD_AFTER = 2  # crashes within HOLD_WINDOW_S after which a model waits for the user
HOLD_WINDOW_S = 600.0
# Words for what recovery did to a task, by its event.
OUTCOMES = {
    "response.failed": "failed",
    "response.queued": "requeued",
    "response.resumed": "resumed",
    "response.cancelled": "cancelled",
}


@dataclass
class CrashRecord:
    model: str
    cause: str  # "SIGKILL", "SIGSEGV", "exit code 1"
    at: float  # wall-clock time
    error: EngineCrashed  # the one exception every generation of that process got
    tasks: dict[str, int] = field(default_factory=dict)  # outcome → how many
    held: bool = False  # not loaded again until the user loads it
    # No task was running on it (the out-of-memory killer picks the biggest idle process):
    # dropped at once, and not counted towards the hold, which stops a model whose tasks
    # crash it again and again; nothing of an idle death starts it again by itself.
    idle: bool = False

    def count(self, items: list[RecoveryItem]) -> None:
        for item in items:
            word = OUTCOMES.get(item.event_type, item.event_type)
            self.tasks[word] = self.tasks.get(word, 0) + 1

    def as_api(self) -> dict[str, Any]:
        return {
            "signal": self.cause,
            "at": int(self.at),
            "tasks": dict(self.tasks),
            "held": self.held,
        }

    def tasks_text(self) -> str:
        """What became of its tasks: "1 resumed, 1 failed" (for the window)."""
        return ", ".join(f"{n} {word}" for word, n in self.tasks.items()) or "none unfinished"


class CrashLog:
    def __init__(self) -> None:
        self._records: dict[str, list[CrashRecord]] = {}
        self.held: set[str] = set()

    def record(
        self, model: str, crash: EngineCrashed, *, idle: bool = False
    ) -> tuple[CrashRecord, bool]:
        """The record of this crash, and whether it is new (each generation the process
        was running reports the same crash). `idle`: no task was running on it."""
        records = self._records.setdefault(model, [])
        for record in records:
            if record.error is crash:
                return record, False
        record = CrashRecord(model, crash.cause, crash.at, crash, idle=idle)
        records.append(record)
        records[:] = [r for r in records if crash.at - r.at <= HOLD_WINDOW_S]  # the recent
        recent = [r for r in records if not r.idle]
        if len(recent) >= HOLD_AFTER:
            record.held = True
            self.held.add(model)
        return record, True

    def last(self, model: str) -> CrashRecord | None:
        records = self._records.get(model)
        return records[-1] if records else None

    def release(self, model: str) -> None:
        """The user loads the model again: it may crash twice more before it is held."""
        self.held.discard(model)
        for record in self._records.pop(model, []):
            record.held = False

    def held_error(self, model: str) -> EngineError:
        last = self.last(model)
        cause = last.cause if last else "a crash"
        return EngineError(
            "engine_crashed",
            f"The engine process of {model} crashed {HOLD_AFTER} times within "
            f"{HOLD_WINDOW_S / 60:.0f} minutes (last: {cause}), so it is not loaded again by "
            "itself: load it again (in the window: Models page, Load again; without one: "
            f"`lmsp-desktop models load {model}` or POST /v1/models/{model}/load) or restart "
            "the service, then submit the request again.",
        )
