"""Open Responses objects built from the store's rows: ResponseResource, output items, task."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from lmsp_desktop.core.engines.base import PromptProgress
from lmsp_desktop.core.json_text import from_json
from lmsp_desktop.core.states import STATUS_OF_STATE, TERMINAL, TaskState

# A joined tasks+responses row: sqlite3.Row from the store, or a plain mapping in tests.
RowLike = Mapping[str, Any] | sqlite3.Row


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """The assistant message output item with its single output_text part."""
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [output_text_part(text)],
    }


def output_text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def item_status(state: TaskState) -> str:
    if state == TaskState.COMPLETED:
        return "completed"
    if state in TERMINAL:
        return "incomplete"
    return "in_progress"


def task_object(
    row: RowLike,
    queue_position: int | None = None,
    request: dict[str, Any] | None = None,
    *,
    prompt_progress: PromptProgress | None = None,
    input_tokens: int | None = None,
) -> dict[str, Any]:
    """The LMSP task object (LMSP_API.md `GET /v1/tasks/{id}`).

    `input_tokens` are the prompt's tokens: the stored count, or the running engine's
    (`input_tokens`: the runner's, known once the prompt is tokenized, before the store has
    it); `prompt_progress` ({total, cached, processed, waiting}) is there only while a
    running task's prompt is being read or waits to be (Runner.prompt_progress; in memory,
    never stored): `waiting` true until its own read begins (it waits behind another
    prompt's read), processed == cached meanwhile. A download's has `download_progress`
    (its bytes on disk and speed, the wait for the hub: `_download_progress`).

    `api` says which API created it; `stored` is false for a `store: false` request, whose
    response cannot be retrieved or continued (its task stays visible until retention);
    `dropped_tools` names the tool types the request sent that the service cannot run (not
    offered to the model); `stop_sequence` is the request's stop sequence that ended the
    output (null when none did, and in lists).
    """
    error = from_json(row["error"]) if row["error"] else None
    if request is None:
        request = from_json(row["request"])
    task: dict[str, Any] = {
        "id": row["id"],
        "object": "task",
        "state": row["state"],
        "on_restart": row["on_restart"],
        "model": row["model"],
        "client_id": row["client_id"],
        "mode": row["mode"],
        "queue_position": queue_position if row["state"] == TaskState.QUEUED else None,
        "created_at": row["created_at"],
        "started_at": _int_or_none(row["started_at"]),
        "finished_at": _int_or_none(row["finished_at"]),
        "restarts": row["restarts"],
        "last_sequence_number": row["last_seq"],
        "input_tokens": input_tokens if input_tokens is not None else _stored_input(row),
        "output_tokens": row["output_tokens"],
        "error": error,
        "dropped_tools": request.get("dropped_tools") or [],
        "notes": request.get("notes") or [],
        "api": request.get("api") or "responses",
        "kind": row["kind"] if "kind" in row.keys() else "response",  # noqa: SIM118
        "stored": request.get("store") in (None, True, 1),
        "stop_sequence": _column(row, "stop_sequence"),
    }
    if task["kind"] == "download":
        task["download_progress"] = _download_progress(row, request)
    if prompt_progress is not None and row["state"] == TaskState.RUNNING:
        task["prompt_progress"] = {
            "total": prompt_progress.total,
            "cached": prompt_progress.cached,
            "processed": prompt_progress.processed,
            "waiting": prompt_progress.waiting,
        }
    return task


def _download_progress(row: RowLike, request: dict[str, Any]) -> dict[str, Any]:
    """A download's bytes, from what the store keeps (task_reads.DOWNLOAD_PROGRESS: the
    latest progress while it runs, a cancelled or failed one's last, else its request's
    total): `bytes_done` (null while not counted yet), `bytes_total`,
    `bytes_per_s` (while it runs, null before a speed is known), the `file` being fetched,
    and while it waits to try the hub again `retry_at` (Unix seconds) and `retry_reason`."""
    raw = _column(row, "progress")
    stored = from_json(raw) if raw else {}
    state = row["state"]
    total = int(stored.get("bytes_total") or request.get("bytes_total") or 0)
    done = stored.get("bytes_done")
    if state == TaskState.COMPLETED:
        done = total  # all of it: its progress is cleared at its end
    running = state == TaskState.RUNNING
    progress: dict[str, Any] = {
        "bytes_done": done,
        "bytes_total": total,
        "bytes_per_s": stored.get("bytes_per_s") if running else None,
        "file": stored.get("file") if running else None,
    }
    if running and stored.get("retry_at"):
        progress["retry_at"] = stored["retry_at"]
        progress["retry_reason"] = stored.get("retry_reason")
    return progress


def _stored_input(row: RowLike) -> int:
    value = _column(row, "input_tokens")
    return int(value) if value is not None else 0


def _column(row: RowLike, name: str) -> Any:
    """A column's value, None for rows read without it (lists, tests' plain mappings)."""
    return row[name] if name in row.keys() else None  # noqa: SIM118


def cached_tokens_of(row: RowLike) -> int:
    """Of the row's input tokens, those the engine's prefix cache held (0 for rows read
    without the column)."""
    return int(row["cached_tokens"]) if "cached_tokens" in row.keys() else 0  # noqa: SIM118


def _output_items(row: RowLike) -> list[dict[str, Any]] | None:
    raw = row["output_items"] if "output_items" in row.keys() else None  # noqa: SIM118
    return None if raw is None else list(from_json(raw))


def _items_output(items: list[dict[str, Any]], text: str, state: TaskState) -> list[dict[str, Any]]:
    """The message (text from `output_text`) and function calls, in output order; a call
    still open when the task ended is incomplete."""
    output = []
    for entry in items:
        if entry["type"] == "message":
            output.append(message_item(entry["id"], text, item_status(state)))
            continue
        status = entry["status"]
        if status == "in_progress" and state in TERMINAL:
            status = "incomplete"
        item = {
            "type": "function_call",
            "id": entry["id"],
            "call_id": entry["call_id"],
            "name": entry["name"],
            "arguments": entry["arguments"],
            "status": status,
        }
        if entry.get("namespace"):
            item["namespace"] = entry["namespace"]
        output.append(item)
    return output


def _text_format(request: dict[str, Any]) -> dict[str, Any]:
    """The output format as Open Responses echoes it: a json_schema format without its
    schema (the document's JsonSchemaResponseFormat has `schema: null`)."""
    fmt = dict(request.get("text_format") or {"type": "text"})
    if fmt.get("type") == "json_schema":
        fmt["schema"] = None
    return fmt


def _tool_choice(request: dict[str, Any]) -> Any:
    """The tool choice as Open Responses writes it (allowed_tools as its object)."""
    choice = request.get("tool_choice") or "auto"
    allowed = request.get("allowed_tools")
    if allowed:
        tools = [{"type": "function", "name": name} for name in allowed]
        return {"type": "allowed_tools", "mode": choice, "tools": tools}
    return choice


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def build_response(
    row: RowLike, queue_position: int | None = None, request: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A valid Open Responses `ResponseResource` for a joined tasks+responses row (`request`:
    its request column already decoded, when the caller has it).

    Every required field is present; nullable ones are null rather than missing; sampling
    settings are the values actually used.
    """
    if request is None:
        request = from_json(row["request"])
    state = TaskState(row["state"])
    output: list[dict[str, Any]] = []
    items = _output_items(row)
    if items is not None:  # a response that may call tools (storage/output_items.py)
        output = _items_output(items, row["output_text"], state)
    elif row["item_id"]:
        output.append(message_item(row["item_id"], row["output_text"], item_status(state)))
    task = task_object(row, queue_position, request)
    error = task["error"]  # the stored error, decoded once for both
    finished = state in TERMINAL
    usage = None
    if finished or row["output_tokens"]:
        usage = {
            "input_tokens": row["input_tokens"],
            "output_tokens": row["output_tokens"],
            "total_tokens": row["input_tokens"] + row["output_tokens"],
            "input_tokens_details": {"cached_tokens": cached_tokens_of(row)},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    return {
        "id": row["id"],
        "object": "response",
        "created_at": row["created_at"],
        "completed_at": row["completed_at"],
        "status": STATUS_OF_STATE[state],
        "incomplete_details": (
            {"reason": row["incomplete_reason"]} if row["incomplete_reason"] else None
        ),
        "model": row["model"],
        "previous_response_id": request.get("previous_response_id"),
        "instructions": request.get("instructions"),
        "output": output,
        "error": {"code": error["code"], "message": error["message"]} if error else None,
        "tools": [{"type": "function", **tool} for tool in request.get("tools") or []],
        "tool_choice": _tool_choice(request),
        "truncation": request.get("truncation", "disabled"),
        "parallel_tool_calls": bool(request.get("parallel_tool_calls", False)),
        "text": {"format": _text_format(request)},
        # A download task (kind `download`) samples nothing: the defaults stand in.
        "top_p": request.get("top_p", 1.0),
        "presence_penalty": request.get("presence_penalty", 0.0),
        "frequency_penalty": request.get("frequency_penalty", 0.0),
        "top_logprobs": 0,
        "temperature": request.get("temperature", 1.0),
        "reasoning": _reasoning(request.get("reasoning")),
        "usage": usage,
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": request.get("max_tool_calls"),
        "store": bool(request.get("store", True)),
        "background": bool(request.get("background", False)),
        "service_tier": "default",
        "metadata": request.get("metadata") or {},
        "safety_identifier": request.get("safety_identifier"),
        "prompt_cache_key": request.get("prompt_cache_key"),
        "include": request.get("include") or [],
        "user": request.get("user"),
        "output_text": row["output_text"],
        "task": task,
    }


def created_response(
    task_id: str,
    created_at: int,
    model: str,
    client_id: str | None,
    on_restart: str,
    mode: str,
    kind: str,
    request: dict[str, Any],
) -> dict[str, Any]:
    """`build_response` of a task just created (queued, nothing run, its `response.created`
    counted: the row `creates.created_row` describes), with its queue position None, built
    straight from what the create knows instead of read back from a row (B1: a third of a
    create's own Python was this object, built by the generic path). The same keys, order
    and values as build_response's (tests/unit/core/test_created_response.py compares them);
    a download's task object has more (its progress): build_response it."""
    assert kind != "download"
    task = {
        "id": task_id,
        "object": "task",
        "state": TaskState.QUEUED,
        "on_restart": on_restart,
        "model": model,
        "client_id": client_id,
        "mode": mode,
        "queue_position": None,
        "created_at": created_at,
        "started_at": None,
        "finished_at": None,
        "restarts": 0,
        "last_sequence_number": 1,
        "input_tokens": 0,
        "output_tokens": 0,
        "error": None,
        "dropped_tools": request.get("dropped_tools") or [],
        "notes": request.get("notes") or [],
        "api": request.get("api") or "responses",
        "kind": kind,
        "stored": request.get("store") in (None, True, 1),
        "stop_sequence": None,
    }
    get = request.get
    return {
        "id": task_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": None,
        "status": "queued",
        "incomplete_details": None,
        "model": model,
        "previous_response_id": get("previous_response_id"),
        "instructions": get("instructions"),
        "output": [],
        "error": None,
        "tools": [{"type": "function", **tool} for tool in get("tools") or ()],
        "tool_choice": _tool_choice(request),
        "truncation": get("truncation", "disabled"),
        "parallel_tool_calls": bool(get("parallel_tool_calls", False)),
        "text": {"format": _text_format(request)},
        "top_p": get("top_p", 1.0),
        "presence_penalty": get("presence_penalty", 0.0),
        "frequency_penalty": get("frequency_penalty", 0.0),
        "top_logprobs": 0,
        "temperature": get("temperature", 1.0),
        "reasoning": _reasoning(get("reasoning")),
        "usage": None,
        "max_output_tokens": get("max_output_tokens"),
        "max_tool_calls": get("max_tool_calls"),
        "store": bool(get("store", True)),
        "background": bool(get("background", False)),
        "service_tier": "default",
        "metadata": get("metadata") or {},
        "safety_identifier": get("safety_identifier"),
        "prompt_cache_key": get("prompt_cache_key"),
        "include": get("include") or [],
        "user": get("user"),
        "output_text": "",
        "task": task,
    }


def _reasoning(value: Any) -> dict[str, Any] | None:
    """The reasoning settings as sent, in the shape the schema requires (effort, summary)."""
    if not isinstance(value, dict):
        return None
    return {"effort": value.get("effort"), "summary": value.get("summary")}
