"""The window's task filters: the state groups the Tasks page offers, by the core's states."""

from __future__ import annotations

from lmsp_desktop.core.states import UNFINISHED, TaskState

ACTIVE = tuple(state for state in TaskState if state in UNFINISHED)  # the core's set
STATE_FILTERS: dict[str, tuple[str, ...]] = {
    "All": (),
    "Active": tuple(ACTIVE),
    "Queued": (TaskState.QUEUED,),
    "Running": (TaskState.LOADING, TaskState.RUNNING, TaskState.CANCELLING),
    "Finished": (TaskState.COMPLETED, TaskState.INCOMPLETE, TaskState.CANCELLED),
    "Failed": (TaskState.FAILED,),
}
