"""Chat Completions answers rendered from a task: the `chat.completion` object from its row,
and `chat.completion.chunk` SSE lines from its committed events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lmsp_desktop.core.api.resource import RowLike, build_response, cached_tokens_of, task_object
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.service import sse
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.tools.chat_deltas import ToolCallDeltas


def new_chat_id() -> str:
    """`chatcmpl-…`: the id of a chat completion and of its task."""
    return new_id("chatcmpl", sep="-")


DONE_LINE = b"data: [DONE]\n\n"
# A task's final state and how it ended → OpenAI's finish_reason.
_FINISH = {TaskState.COMPLETED: "stop", TaskState.INCOMPLETE: "length"}


def chat_usage(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def finish_reason(response: Mapping[str, Any]) -> str:
    """`length` when cut short (also in the middle of a call's arguments, as OpenAI says),
    `tool_calls` when the output has function calls, else `stop`."""
    state = TaskState(response["task"]["state"])
    calls = any(item.get("type") == "function_call" for item in response.get("output", []))
    if calls and state == TaskState.COMPLETED:
        return "tool_calls"
    return _FINISH.get(state, "stop")


def tool_calls_of(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        for item in response.get("output", [])
        if item.get("type") == "function_call"
    ]


def completion_object(row: RowLike) -> dict[str, Any]:
    """The `chat.completion` of a finished task (with the LMSP `task` object, as responses
    carry it)."""
    response = build_response(row)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": response["output_text"],
        "refusal": None,
        "annotations": [],
    }
    calls = tool_calls_of(response)
    if calls:
        message["tool_calls"] = calls
        message["content"] = response["output_text"] or None
    return {
        "id": row["id"],
        "object": "chat.completion",
        "created": row["created_at"],
        "model": row["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason(response),
            }
        ],
        "usage": chat_usage(row["input_tokens"], row["output_tokens"], cached_tokens_of(row)),
        "service_tier": "default",
        "system_fingerprint": None,
        "task": task_object(row),
    }


class ChunkRenderer:
    """Turns one task's committed events into `data:` lines of `chat.completion.chunk`s.

    Deltas are the hot path: their JSON is put together from a fixed prefix and suffix
    rather than a dict serialised per token.
    """

    keepalive = sse.KEEPALIVE

    def __init__(self, task_id: str, created: int, model: str, include_usage: bool) -> None:
        self.include_usage = include_usage
        self.finished = False
        self._calls = ToolCallDeltas()
        head = {"id": task_id, "object": "chat.completion.chunk", "created": created}
        self._head = {**head, "model": model, "service_tier": "default", "system_fingerprint": None}
        usage = ',"usage":null' if include_usage else ""
        self._delta_prefix = (
            "data: "
            + json.dumps(self._head, separators=(",", ":"))[:-1]
            + ',"choices":[{"index":0,"delta":{"content":'
        )
        self._delta_suffix = '},"logprobs":null,"finish_reason":null}]' + usage + "}\n\n"

    def opening(self) -> bytes:
        """The first chunk: the assistant role, before any content (as OpenAI sends it)."""
        return self._line({"role": "assistant", "content": "", "refusal": None}, None)

    def render(self, event: dict[str, Any]) -> bytes:
        """The lines an event becomes (b"" for events a chat client has no use for)."""
        kind = event["type"]
        if kind == "response.output_text.delta":
            return (self._delta_prefix + json.dumps(event["delta"]) + self._delta_suffix).encode()
        call = self._calls.delta(event)
        if call is not None:  # a function call opened, or a piece of its arguments
            return self._line(call, None)
        if kind in ("response.completed", "response.incomplete"):
            self.finished = True
            response = event["response"]
            out = self._line({}, finish_reason(response))
            if self.include_usage:
                usage = response.get("usage") or {}
                chunk = {
                    **self._head,
                    "choices": [],
                    "usage": chat_usage(
                        usage.get("input_tokens", 0),
                        usage.get("output_tokens", 0),
                        (usage.get("input_tokens_details") or {}).get("cached_tokens", 0),
                    ),
                }
                out += _data(chunk)
            return out + DONE_LINE
        if kind == "response.failed":
            self.finished = True
            error = event["response"].get("error") or {}
            return _data(
                {
                    "error": {
                        "type": "server_error",
                        "code": error.get("code", "failed"),
                        "message": error.get("message", "The generation failed."),
                        "param": None,
                    }
                }
            )
        if kind == "response.cancelled":
            self.finished = True
            return _data(
                {
                    "error": {
                        "type": "cancelled",
                        "code": "cancelled",
                        "message": "The chat completion was cancelled before it finished.",
                        "param": None,
                    }
                }
            )
        if kind == "error":  # never committed: the service stopping first (api/stopping.py)
            self.finished = True
            return _data({"error": event["error"]})
        return b""

    def _line(self, delta: dict[str, Any], reason: str | None) -> bytes:
        chunk: dict[str, Any] = {
            **self._head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        }
        if self.include_usage:
            chunk["usage"] = None
        return _data(chunk)


def _data(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()
