"""The core's seam to any view of it: the read models and change events a window (or any
other observer) gets, and the listener it implements.

These types belong to the core, not to the store: storage builds them, `Core` hands them out,
and the window (gui/core_api.py) names only these, so the store can change without touching a
widget and a widget cannot reach the database around the core.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lmsp_desktop.core.engines.base import PromptProgress as PromptProgress
from lmsp_desktop.core.models.info import ModelEvent
from lmsp_desktop.core.states import EventType, TaskKind, TaskState

# The error a task gets when a restart finds it unfinished and its policy is fail (11.3).
RESTART_ERROR_CODE = "server_restarted"


class Record(Protocol):
    """A stored row read by name (a task with its response, one event)."""

    def __getitem__(self, key: str) -> Any: ...

    def keys(self) -> list[str]: ...


@dataclass(frozen=True)
class TaskChange:
    """What listeners hear after a commit: which task, its state and its last event number."""

    task_id: str
    state: TaskState
    last_seq: int
    model: str
    event_types: tuple[str, ...] = ()
    # The committed events themselves when the commit was text deltas (the streaming hot
    # path), so followers need not read them back; empty otherwise.
    events: Sequence[dict[str, Any]] = ()
    kind: str = TaskKind.RESPONSE  # who runs it: the runner, or the downloads


@dataclass(frozen=True)
class RecoveryItem:
    task_id: str
    model: str
    state_before: str
    on_restart: str
    state_after: str
    event_type: str
    sequence_number: int
    # For a resumed task: how many generated tokens its snapshot kept (the resume continues
    # after them). None for other outcomes, and in reports stored before this was recorded.
    tokens_kept: int | None = None
    # For a download: the bytes its last progress said were on disk (what it resumes from, or
    # what a pull continues from). None for other tasks and in older reports.
    bytes_kept: int | None = None


@dataclass
class RecoveryReport:
    started_at: float
    finished_at: float
    items: list[RecoveryItem]
    # Set when the previous run was quit on purpose with this many tasks unfinished (their
    # restart policies apply all the same); None after a crash or a kill.
    quit_with_unfinished: int | None = None
    # The signal that stopped that run ("SIGTERM", "SIGINT"): a stop the user did not choose
    # in the window, so the report does not say "you quit". None when the user quit.
    stopped_by_signal: str | None = None

    def cause(self) -> str:
        """What left the tasks behind, as the end of a sentence."""
        if self.quit_with_unfinished is not None:
            n = self.quit_with_unfinished
            unfinished = f"with {n} task{'' if n == 1 else 's'} unfinished"
            if self.stopped_by_signal:
                who = f"LMSP Desktop was stopped by a signal ({self.stopped_by_signal})"
                return f"after {who} {unfinished}"
            return f"after you quit {unfinished}"
        return "after an unclean shutdown"

    def as_json(self) -> dict[str, Any]:
        return {
            "started_at": int(self.started_at),
            "finished_at": int(self.finished_at),
            # vars() rather than dataclasses.asdict: asdict deep-copies, 0.5 s for 10k items.
            "items": [dict(vars(i)) for i in self.items],
        }

    def summary(self) -> str:
        """One line such as "3 failed with server_restarted, 2 requeued, 1 resumed"."""
        # Counted by the event's name, then worded: no enum built per item (10k at startup).
        counts = Counter(item.event_type for item in self.items)
        words = {
            EventType.FAILED: f"failed with {RESTART_ERROR_CODE}",
            EventType.QUEUED: "requeued",
            EventType.RESUMED: "resumed",
            EventType.CANCELLED: "cancelled",
        }
        unknown = set(counts) - set(map(str, words))
        if unknown:
            raise ValueError(f"not an event recovery writes: {sorted(unknown)}")
        return ", ".join(f"{counts[str(e)]} {w}" for e, w in words.items() if counts[str(e)])


@dataclass(frozen=True)
class TaskFilter:
    """Which tasks a list shows: states (empty: all), one model, one client's, and a text
    found in the id, model, client id or client name (matched literally)."""

    states: tuple[str, ...] = ()
    text: str = ""
    model: str | None = None
    client_id: str | None = None


@dataclass
class TaskRow:
    """One row of the tasks table, as read from the store."""

    n: int
    id: str
    client: str
    model: str
    state: str
    on_restart: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    last_seq: int
    output_tokens: int
    queue_position: int | None
    error: dict[str, Any] | None
    # Its output spans a restart (resumed from a snapshot, or ended by the recovery): the
    # tokens and times include the downtime, so it has no honest speed.
    spans_restart: bool = False
    # A download (kind `download`): its latest progress {bytes_done, bytes_total,
    # bytes_per_s}, shown instead of tokens; None for responses and before the first bytes.
    kind: str = "response"
    progress: dict[str, Any] | None = None
    # A resumed task's current run: when it resumed and the output tokens it had then; its
    # speed is that run's own (the tokens since, over the time since). None otherwise.
    resumed_at: float | None = None
    resumed_tokens: int = 0
    # Why an `incomplete` task stopped (responses.incomplete_reason) and the output limit
    # its request set (None: none), which tell the token limit from a full context.
    incomplete_reason: str | None = None
    output_limit: int | None = None
    # Ended (failed or cancelled) by the recovery after a restart: its finished_at is the
    # restart's time, so its run is measured to `ran_until`, the time of its last event
    # before the stop (None: nothing after its start, so how long it ran is not known).
    ended_by_restart: bool = False
    ran_until: float | None = None
    # When its output began (its current run's first token; tasks.first_token_at, stored at
    # its end: None while it runs, the runner has it) and its prompt's length.
    first_token_at: float | None = None
    input_tokens: int = 0
    # How many times a restart put it back to work (resumed or requeued); its started_at is
    # its last run's start.
    restarts: int = 0

    @classmethod
    def of(cls, row: Any) -> TaskRow:
        """The row of a list query (core/storage/task_reads.py's LISTED)."""
        return cls(
            n=row["n"],
            id=row["id"],
            client=row["client_name"] or row["client_id"] or "desktop",
            model=row["model"],
            state=row["state"],
            on_restart=row["on_restart"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            last_seq=row["last_seq"],
            output_tokens=row["output_tokens"],
            queue_position=row["queue_position"],
            error=json.loads(row["error"]) if row["error"] else None,
            spans_restart=bool(row["spans_restart"]),
            kind=row["kind"],
            progress=json.loads(row["progress"]) if row["progress"] else None,
            incomplete_reason=row["incomplete_reason"],
            output_limit=row["output_limit"],
            ended_by_restart=bool(row["ended_by_restart"]),
            ran_until=row["ran_until"],
            first_token_at=row["first_token_at"],
            input_tokens=row["input_tokens"],
            restarts=row["restarts"],
            **_resumed_run(row["resumed_run"]),
        )

    def duration(self, now: float | None = None) -> float | None:
        """How long it ran; for a task ended by the restart, until its last event before the
        stop (never the downtime up to the restart), None when that is not known."""
        if self.started_at is None:
            return None
        if self.ended_by_restart:
            return None if self.ran_until is None else max(0.0, self.ran_until - self.started_at)
        return max(0.0, (self.finished_at or now or time.time()) - self.started_at)

    def download_fraction(self) -> float | None:
        """How much of an unfinished download is on disk (0..1); None for other tasks, no
        total, or a download that ended."""
        if self.kind != "download" or not self.progress or self.finished_at is not None:
            return None
        total = self.progress.get("bytes_total") or 0
        return min(1.0, self.progress.get("bytes_done", 0) / total) if total else None

    def seconds_left(self) -> float | None:
        """A running download's time left at its current speed."""
        if self.kind != "download" or not self.progress or self.finished_at is not None:
            return None
        speed = self.progress.get("bytes_per_s")
        left = (self.progress.get("bytes_total") or 0) - self.progress.get("bytes_done", 0)
        return left / speed if speed and left >= 0 else None

    def tokens_per_second(
        self, now: float | None = None, first_token_at: float | None = None
    ) -> float | None:
        """Output tokens per second of its current run's generation: the tokens over the
        time since its first token (`first_token_at`: the runner's, for a running task), so
        the prompt's read is not counted (llama-server's predicted_per_second, Ollama's
        eval_rate). Without a first token time (tasks stored before it was kept, a run ended
        by the recovery or a kill), over its whole run, the read included. None before any
        output, and for output that spans a restart without a run of its own since (ended by
        the recovery). A resumed task's run counts the tokens since the resume (the tokens
        kept from before it and the downtime would make a speed no run had)."""
        generating = self.generation(now, first_token_at)
        if generating is not None:
            made, since = generating
            return made / since if made > 0 and since > 0 else None
        if self.resumed_at is not None:
            tokens = self.output_tokens - self.resumed_tokens
            run = (self.finished_at or now or time.time()) - self.resumed_at
            return tokens / run if tokens > 0 and run > 0 else None
        if self.spans_restart:
            return None
        spent = self.duration(now)
        if not spent or not self.output_tokens:
            return None
        return self.output_tokens / spent

    def first_token(self, first_token_at: float | None = None) -> float | None:
        """When its current run's output began: stored at its end, else `first_token_at`
        (the runner's, while it runs); None when not known."""
        if self.ended_by_restart:
            return None
        return self.first_token_at if self.first_token_at is not None else first_token_at

    def generation(
        self, now: float | None = None, first_token_at: float | None = None
    ) -> tuple[int, float] | None:
        """Its current run's output tokens and the seconds since their first (to its end, or
        `now`); None when the first token's time is not known."""
        first = self.first_token(first_token_at)
        if first is None:
            return None
        kept = self.resumed_tokens if self.resumed_at is not None else 0
        end = self.finished_at or now or time.time()
        return self.output_tokens - kept, max(0.0, end - first)

    def prompt_read(self, first_token_at: float | None = None) -> tuple[float, float | None] | None:
        """Its current run's time to first token and its prompt's read speed (input tokens
        over that time; None without them); None when the first token's time is not known."""
        first = self.first_token(first_token_at)
        began = self.resumed_at if self.resumed_at is not None else self.started_at
        if first is None or began is None:
            return None
        waited = max(0.0, first - began)
        return waited, (self.input_tokens / waited if self.input_tokens and waited else None)


def _resumed_run(raw: str | None) -> dict[str, Any]:
    """TaskRow's resumed_at and resumed_tokens from LISTED's resumed_run ('[at, tokens]')."""
    if not raw:
        return {}
    at, tokens = json.loads(raw)
    return {"resumed_at": float(at), "resumed_tokens": int(tokens)}


def reading_prompt(processed: int, total: int) -> str:
    """How far a prompt has been read, as the window and `lmsp-desktop tasks` say it:
    "reading prompt 3,072/8,192 (37%)" (the percentage rounded down: 100% only when done)."""
    percent = processed * 100 // total if total > 0 else 0
    return f"reading prompt {processed:,}/{total:,} ({percent}%)"


def prompt_status(progress: PromptProgress) -> str:
    """A running task's prompt before its output, as the window and `lmsp-desktop tasks` say
    it: "waiting to read its prompt (60 tokens)" while it waits behind another prompt's read
    (or for a sequence), then how far its own read is (`reading_prompt`)."""
    if progress.waiting:
        return f"waiting to read its prompt ({progress.total:,} tokens)"
    return reading_prompt(progress.processed, progress.total)


def binary_size(n: float) -> str:
    """Bytes in binary units named as such ("93.8 MiB"), as the window shows every size."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def time_of_day(ts: float) -> str:
    """A local time of day ("16:41:31"), with the date when it is not today."""
    local = time.localtime(ts)
    if time.strftime("%Y-%m-%d", local) != time.strftime("%Y-%m-%d"):
        return time.strftime("%Y-%m-%d %H:%M", local)
    return time.strftime("%H:%M:%S", local)


def download_status(state: str, progress: Mapping[str, Any] | None) -> str | None:
    """A download's bytes, as the window's task table and `lmsp-desktop tasks` say them in
    place of tokens: "49.0 MiB / 93.8 MiB" while it runs (", waiting for the hub until
    16:41:31" while it waits to try again), "93.8 MiB" once it completed, "cancelled at
    768.0 KiB of 3.0 MiB", "failed at 1.2 MiB of 3.0 MiB"; None when there is nothing to say
    (no total known, or a failed one that counted no byte). `progress`: a download's latest
    progress (the store's `progress` column, or the task object's `download_progress`)."""
    progress = progress or {}
    total = progress.get("bytes_total") or 0
    if not total:
        return None
    if state == TaskState.COMPLETED:
        return binary_size(total)  # what it fetched
    if state == TaskState.FAILED and progress.get("bytes_done") is None:
        return None  # it failed before any byte was counted
    done = binary_size(progress.get("bytes_done") or 0)
    if state == TaskState.CANCELLED:  # how far it got, as its log says
        return f"cancelled at {done} of {binary_size(total)}"
    if state == TaskState.FAILED:  # how far it got (its error says what became of them)
        return f"failed at {done} of {binary_size(total)}"
    if state not in (TaskState.QUEUED, TaskState.RUNNING):
        return None
    if progress.get("retry_at") and state == TaskState.RUNNING:
        until = time_of_day(progress["retry_at"])
        return f"{done} / {binary_size(total)}, waiting for the hub until {until}"
    return f"{done} / {binary_size(total)}"


class CoreListener(Protocol):
    """What the core tells a view. Called on the loop thread, except `on_model` with hashing
    progress, which may come from a hashing thread."""

    def on_task(self, change: TaskChange) -> None: ...

    def on_model(self, event: ModelEvent | None) -> None: ...

    def on_model_loaded(self, model_id: str, state: str) -> None: ...

    def on_pairing(self) -> None: ...
