"""ResponseResource and task objects built from store rows, for every task state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lmsp_desktop.core.api.resource import build_response, task_object
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.engines.base import PromptProgress
from lmsp_desktop.core.states import TaskState

REQUIRED = {
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "incomplete_details",
    "model",
    "previous_response_id",
    "instructions",
    "output",
    "error",
    "tools",
    "tool_choice",
    "truncation",
    "parallel_tool_calls",
    "text",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "temperature",
    "reasoning",
    "usage",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
}


def row(state: str, **overrides: Any) -> dict[str, Any]:
    request = parse_create(
        {
            "model": "m",
            "input": "Hi",
            "instructions": "Be brief.",
            "temperature": 0.2,
            "max_output_tokens": 9,
            "metadata": {"a": "b"},
            "background": True,
        },
        "fail",
    )
    base: dict[str, Any] = {
        "n": 1,
        "id": "resp_1",
        "client_id": "client_1",
        "model": "m",
        "state": state,
        "on_restart": "fail",
        "mode": "background",
        "created_at": 100,
        "recovered_boot": None,
        "started_at": None,
        "finished_at": None,
        "restarts": 0,
        "last_seq": 1,
        "snapshot": None,
        "request": json.dumps(request),
        "output_text": "",
        "item_id": None,
        "input_tokens": 0,
        "output_tokens": 0,
        "completed_at": None,
        "error": None,
        "incomplete_reason": None,
    }
    base.update(overrides)
    return base


def test_a_queued_response_has_every_required_field_and_no_output() -> None:
    response = build_response(row("queued"), queue_position=2)
    assert set(response) >= REQUIRED
    assert response["status"] == "queued" and response["output"] == []
    assert response["usage"] is None and response["completed_at"] is None
    assert response["text"] == {"format": {"type": "text"}}
    assert response["task"]["queue_position"] == 2
    # The request's real settings are echoed.
    assert (response["temperature"], response["top_p"], response["max_output_tokens"]) == (
        0.2,
        0.95,
        9,
    )
    assert response["instructions"] == "Be brief." and response["metadata"] == {"a": "b"}
    assert response["background"] is True and response["store"] is True
    for key in (
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "top_logprobs",
        "service_tier",
        "truncation",
        "store",
        "background",
        "parallel_tool_calls",
    ):
        assert response[key] is not None


@pytest.mark.parametrize(
    ("state", "status", "item_status"),
    [
        ("loading", "in_progress", None),
        ("running", "in_progress", "in_progress"),
        ("cancelling", "in_progress", "in_progress"),
        ("completed", "completed", "completed"),
        ("incomplete", "incomplete", "incomplete"),
        ("failed", "failed", "incomplete"),
        ("cancelled", "cancelled", "incomplete"),
    ],
)
def test_status_and_item_status_follow_the_task_state(
    state: str, status: str, item_status: str | None
) -> None:
    finished = TaskState(state) in (TaskState.COMPLETED, TaskState.INCOMPLETE)
    extra: dict[str, Any] = {}
    if item_status:
        extra = {"item_id": "msg_1", "output_text": "Hello", "input_tokens": 7, "output_tokens": 2}
    if finished:
        extra["completed_at"] = 123
    if state == "incomplete":
        extra["incomplete_reason"] = "max_output_tokens"
    if state == "failed":
        extra["error"] = json.dumps({"code": "server_restarted", "message": "Restarted."})
    response = build_response(row(state, **extra))
    assert response["status"] == status and response["task"]["state"] == state
    if item_status is None:
        assert response["output"] == []
        return
    [item] = response["output"]
    assert item == {
        "type": "message",
        "id": "msg_1",
        "status": item_status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}],
    }
    assert response["output_text"] == "Hello"
    assert response["usage"] == {
        "input_tokens": 7,
        "output_tokens": 2,
        "total_tokens": 9,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    assert response["completed_at"] == (123 if finished else None)
    assert response["incomplete_details"] == (
        {"reason": "max_output_tokens"} if state == "incomplete" else None
    )
    assert response["error"] == (
        {"code": "server_restarted", "message": "Restarted."} if state == "failed" else None
    )


def test_a_finished_response_without_tokens_still_reports_usage() -> None:
    response = build_response(row("cancelled", finished_at=200.5))
    assert response["usage"]["total_tokens"] == 0
    assert response["task"]["finished_at"] == 200


def test_task_object_fields() -> None:
    task = task_object(
        row("running", started_at=150.7, last_seq=9, input_tokens=5, output_tokens=4),
        queue_position=3,
    )
    assert task == {
        "id": "resp_1",
        "object": "task",
        "state": "running",
        "on_restart": "fail",
        "model": "m",
        "client_id": "client_1",
        "mode": "background",
        "queue_position": None,  # only while queued
        "created_at": 100,
        "started_at": 150,
        "finished_at": None,
        "restarts": 0,
        "last_sequence_number": 9,
        "input_tokens": 5,
        "output_tokens": 4,
        "error": None,
        "dropped_tools": [],
        "notes": [],  # what the service could not honour (e.g. Anthropic's `thinking`)
        "api": "responses",
        "kind": "response",  # a row read before kinds existed is a response
        "stored": True,
        "stop_sequence": None,  # read without the column: no stop sequence ended it
    }
    assert task_object(row("queued"), 3)["queue_position"] == 3


def test_a_running_tasks_prompt_read_shows_only_while_it_runs() -> None:
    """The runner's figures (in memory) go into the task object: how far the prompt has been
    read, and its length before the store has it."""
    read = PromptProgress(total=2048, cached=64, processed=1024)
    running = task_object(row("running", input_tokens=0), prompt_progress=read, input_tokens=2048)
    assert running["prompt_progress"] == {
        "total": 2048,
        "cached": 64,
        "processed": 1024,
        "waiting": False,
    }
    assert running["input_tokens"] == 2048
    # Behind another task's read: it says so, its length known, nothing of it read.
    behind = PromptProgress(total=60, cached=0, processed=0, waiting=True)
    waits = task_object(row("running", input_tokens=0), prompt_progress=behind, input_tokens=60)
    assert waits["prompt_progress"]["waiting"] is True and waits["input_tokens"] == 60
    assert "prompt_progress" not in task_object(row("running", input_tokens=0))
    # A report that comes as the task ends is not shown on an ended task.
    ended = task_object(row("cancelled", input_tokens=0), prompt_progress=read)
    assert "prompt_progress" not in ended and ended["input_tokens"] == 0
