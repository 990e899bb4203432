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
    "response.created": TaskState.QUEUED,
    "response.queued": TaskState.QUEUED,
    "response.loading": TaskState.LOADING,
    "response.in_progress": TaskState.RUNNING,
    "response.resumed": TaskState.RUNNING,
    "response.output_item.added": TaskState.RUNNING,
    "response.content_part.added": TaskState.RUNNING,
    "response.output_text.delta": TaskState.RUNNING,
    "response.output_text.done": TaskState.RUNNING,
    "response.content_part.done": TaskState.RUNNING,
    "response.output_item.done": TaskState.RUNNING,
    "response.cancelling": TaskState.CANCELLING,
    "response.cancelled": TaskState.CANCELLED,
    "response.completed": TaskState.COMPLETED,
    "response.incomplete": TaskState.INCOMPLETE,
    "response.failed": TaskState.FAILED,
}

# Event types that exist only in LMSP; the Responses routes leave them out of their streams.
LMSP_ONLY_EVENTS = frozenset(
    {"response.loading", "response.cancelling", "response.cancelled", "response.resumed"}
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
