"""Task states of LMSP, the events that imply them, and OpenAI's status words for them."""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    QUEUED = "queued"
    LOADING = "loading"
    RUNNING = "running"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    CANCELLED = "cancelled"


# Every state's name, as the API's `state` filters and the metrics spell them.
STATE_NAMES = tuple(state.value for state in TaskState)


class EventType(StrEnum):
    """The type of every event in a task's log (Open Responses' names plus LMSP's own)."""

    CREATED = "response.created"
    QUEUED = "response.queued"
    LOADING = "response.loading"
    IN_PROGRESS = "response.in_progress"
    RESUMED = "response.resumed"
    OUTPUT_ITEM_ADDED = "response.output_item.added"
    CONTENT_PART_ADDED = "response.content_part.added"
    OUTPUT_TEXT_DELTA = "response.output_text.delta"
    OUTPUT_TEXT_DONE = "response.output_text.done"
    CONTENT_PART_DONE = "response.content_part.done"
    OUTPUT_ITEM_DONE = "response.output_item.done"
    CANCELLING = "response.cancelling"
    CANCELLED = "response.cancelled"
    COMPLETED = "response.completed"
    INCOMPLETE = "response.incomplete"
    FAILED = "response.failed"
    # A download task's bytes so far (LMSP's own; coalesced, a few a second at most).
    DOWNLOAD_PROGRESS = "download.progress"


class TaskKind(StrEnum):
    """What a task does: every kind shares the states, events, cancel and recovery above;
    the kind says which part of the service runs it (the runner, or the downloads)."""

    RESPONSE = "response"  # a generation, whichever API asked for it
    DOWNLOAD = "download"  # a model file from the Hugging Face hub
    EMBEDDING = "embedding"  # vectors of texts, computed by a loaded model (no token events)


# The kinds the runner runs (in one queue per model); downloads have their own manager.
RUNNER_KINDS = frozenset({TaskKind.RESPONSE, TaskKind.EMBEDDING})


class RestartPolicy(StrEnum):
    FAIL = "fail"
    RETRY = "retry"
    RESUME = "resume"


UNFINISHED = frozenset(
    {TaskState.QUEUED, TaskState.LOADING, TaskState.RUNNING, TaskState.CANCELLING}
)
TERMINAL = frozenset(
    {TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.FAILED, TaskState.CANCELLED}
)
CANCELLABLE = frozenset({TaskState.QUEUED, TaskState.LOADING, TaskState.RUNNING})

# OpenAI's status words, so OpenAI clients keep working (LMSP_API.md "Responses and tasks").
STATUS_OF_STATE: dict[TaskState, str] = {
    TaskState.QUEUED: "queued",
    TaskState.LOADING: "in_progress",
    TaskState.RUNNING: "in_progress",
    TaskState.CANCELLING: "in_progress",
    TaskState.COMPLETED: "completed",
    TaskState.INCOMPLETE: "incomplete",
    TaskState.FAILED: "failed",
    TaskState.CANCELLED: "cancelled",
}

# The state each event type leaves the task in. Item/part/text events happen while running.
STATE_OF_EVENT: dict[str, TaskState] = {
    EventType.CREATED: TaskState.QUEUED,
    EventType.QUEUED: TaskState.QUEUED,
    EventType.LOADING: TaskState.LOADING,
    EventType.IN_PROGRESS: TaskState.RUNNING,
    EventType.RESUMED: TaskState.RUNNING,
    EventType.OUTPUT_ITEM_ADDED: TaskState.RUNNING,
    EventType.CONTENT_PART_ADDED: TaskState.RUNNING,
    EventType.OUTPUT_TEXT_DELTA: TaskState.RUNNING,
    EventType.OUTPUT_TEXT_DONE: TaskState.RUNNING,
    EventType.CONTENT_PART_DONE: TaskState.RUNNING,
    EventType.OUTPUT_ITEM_DONE: TaskState.RUNNING,
    EventType.CANCELLING: TaskState.CANCELLING,
    EventType.CANCELLED: TaskState.CANCELLED,
    EventType.COMPLETED: TaskState.COMPLETED,
    EventType.INCOMPLETE: TaskState.INCOMPLETE,
    EventType.FAILED: TaskState.FAILED,
    EventType.DOWNLOAD_PROGRESS: TaskState.RUNNING,
}

# The events a task's log ends with (those of its terminal states).
ENDING_EVENTS = frozenset(kind for kind, state in STATE_OF_EVENT.items() if state in TERMINAL)

# Event types that exist only in LMSP; the Responses routes leave them out of their streams.
LMSP_ONLY_EVENTS = frozenset(
    {
        EventType.LOADING,
        EventType.CANCELLING,
        EventType.CANCELLED,
        EventType.RESUMED,
        EventType.DOWNLOAD_PROGRESS,
    }
)

# Table 11.3: the state a leftover task is moved to at startup, by policy.
RECOVERY_TABLE: dict[tuple[TaskState, RestartPolicy], TaskState] = {
    (TaskState.QUEUED, RestartPolicy.FAIL): TaskState.FAILED,
    (TaskState.QUEUED, RestartPolicy.RETRY): TaskState.QUEUED,
    (TaskState.QUEUED, RestartPolicy.RESUME): TaskState.QUEUED,
    (TaskState.LOADING, RestartPolicy.FAIL): TaskState.FAILED,
    (TaskState.LOADING, RestartPolicy.RETRY): TaskState.QUEUED,
    (TaskState.LOADING, RestartPolicy.RESUME): TaskState.QUEUED,
    (TaskState.RUNNING, RestartPolicy.FAIL): TaskState.FAILED,
    (TaskState.RUNNING, RestartPolicy.RETRY): TaskState.QUEUED,
    (TaskState.RUNNING, RestartPolicy.RESUME): TaskState.RUNNING,
    (TaskState.CANCELLING, RestartPolicy.FAIL): TaskState.CANCELLED,
    (TaskState.CANCELLING, RestartPolicy.RETRY): TaskState.CANCELLED,
    (TaskState.CANCELLING, RestartPolicy.RESUME): TaskState.CANCELLED,
}
