"""Anthropic Messages answers rendered from a task: the `message` from its row, the
`message_start` … `message_stop` stream from its committed events, errors in Anthropic's
shape."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from lmsp_desktop.core.api.resource import RowLike, build_response, cached_tokens_of, task_object
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.states import TaskState


def new_message_id() -> str:
    """`msg_…`: the id of a message and of its task."""
    return new_id("msg")


# An HTTP status → Anthropic's error type (docs: "HTTP errors").
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    507: "api_error",
}

# An error that ends a stream (the service stopping: core/api/stopping.py) → its type, the one
# the same error has before a stream (503 shutting_down → overloaded_error): Anthropic's "try
# again shortly", which Claude Code retries when a stream ends with it (2.1.197 looks for
# `"type":"overloaded_error"` in the error), where api_error is an unexpected failure. (The
# anthropic SDKs retry neither once a stream has begun.)
_STREAMED_ERROR_TYPES = {"shutting_down": _ERROR_TYPES[503]}


# Our context error's numbers (context_window.context_exceeded at admission, the engine's
# own at a run): the limit, then the prompt's length.
_TOO_LONG = re.compile(r"maximum context length is (\d+) tokens.*?is (\d+) tokens long", re.S)


def anthropic_error(exc: LmspError) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`; our code kept beside them."""
    kind = _ERROR_TYPES.get(
        exc.status, "api_error" if exc.status >= 500 else "invalid_request_error"
    )
    message = exc.message
    if exc.code == "context_length_exceeded":
        message = _too_long(message)
    return {"type": "error", "error": {"type": kind, "message": message, "code": exc.code}}


def _too_long(message: str) -> str:
    """Anthropic's words first, `prompt is too long: N tokens > M maximum` (Claude Code's
    "Prompt is too long" handling and litellm's Anthropic mapping look for them; OpenAI's
    "maximum context length" stays on the other APIs, where litellm's OpenAI mapping looks
    for it), then our advice as it was."""
    found = _TOO_LONG.search(message)
    if found is None:
        return f"prompt is too long. {message}"
    limit, count = found.groups()
    return f"prompt is too long: {count} tokens > {limit} maximum. {message}"


def tool_use_id(call_id: str) -> str:
    """A tool call's id as Anthropic's clients expect it (`toolu_…`, where our calls have
    `call_…`); an id the client gave (a tool_use it sent back) is kept as it is."""
    return "toolu_" + call_id[5:] if call_id.startswith("call_") else call_id


def stop_reason(response: Mapping[str, Any]) -> str:
    """`max_tokens` when cut short, `tool_use` when the output calls tools (the client has
    them to run, whatever ended the text), `stop_sequence` when one of the request's
    `stop_sequences` did, else `end_turn`."""
    state = TaskState(response["task"]["state"])
    if state == TaskState.INCOMPLETE:
        return "max_tokens"
    if any(item.get("type") == "function_call" for item in response.get("output", [])):
        return "tool_use"
    if response["task"].get("stop_sequence") is not None:
        return "stop_sequence"
    return "end_turn"


def stop_delta(response: Mapping[str, Any]) -> dict[str, Any]:
    """`stop_reason` and `stop_sequence` (the matched string, only with that reason)."""
    reason = stop_reason(response)
    matched = response["task"].get("stop_sequence") if reason == "stop_sequence" else None
    return {"stop_reason": reason, "stop_sequence": matched}


def usage(input_tokens: int, output_tokens: int, cached: int) -> dict[str, Any]:
    """Anthropic counts the prompt tokens read from the cache apart from `input_tokens`."""
    return {
        "input_tokens": input_tokens - cached,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:  # cut short by max_tokens: the text as generated
        return {"_partial_arguments": arguments}


def message_object(row: RowLike) -> dict[str, Any]:
    """The `message` of a finished task (with the LMSP `task` object, as every API's
    answers carry it)."""
    response = build_response(row)
    content: list[dict[str, Any]] = []
    if response["output_text"]:
        content.append({"type": "text", "text": response["output_text"]})
    for item in response["output"]:
        if item.get("type") == "function_call":
            content.append(
                {
                    "type": "tool_use",
                    "id": tool_use_id(item["call_id"]),
                    "name": item["name"],
                    "input": _input(item["arguments"]),
                }
            )
    return {
        "id": row["id"],
        "type": "message",
        "role": "assistant",
        "model": row["model"],
        "content": content,
        **stop_delta(response),
        "usage": usage(row["input_tokens"], row["output_tokens"], cached_tokens_of(row)),
        "task": task_object(row),
    }


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps({"type": kind, **payload}, separators=(",", ":"), ensure_ascii=False)
    return f"event: {kind}\ndata: {data}\n\n".encode()


class MessageStream:
    """Turns one task's committed events into Anthropic's stream events.

    Content blocks open as the output needs them: a text block at the first text, a
    tool_use block per function call; each is stopped before the next opens. Text deltas
    are the hot path: their JSON is put together from a fixed prefix and suffix.
    """

    # What Anthropic's API sends while a message has nothing else to send.
    keepalive = _event("ping", {})

    def __init__(self, row: RowLike, request: dict[str, Any]) -> None:
        self.finished = False
        self._id = str(row["id"])
        self._model = str(row["model"])
        self._index = -1  # the index of the open (or last) content block
        self._open: str | None = None  # "text" or the item id of an open tool_use block
        self._calls: set[str] = set()
        self._text_prefix = b""
        # The prompt's tokens as counted when the request was admitted (context_window.admit;
        # none for an upstream's model): Anthropic sends them in message_start, where clients
        # (LangChain) read them; message_delta has the split with the cache read.
        counted = request.get("input_tokens")
        self._input_tokens = counted if isinstance(counted, int) else 0

    def opening(self) -> bytes:
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(self._input_tokens, 0, 0),
        }
        return _event("message_start", {"message": message}) + _event("ping", {})

    def _start(self, block: dict[str, Any], key: str) -> bytes:
        out = self._stop()
        self._index += 1
        self._open = key
        if key == "text":
            self._text_prefix = (
                "event: content_block_delta\n"
                f'data: {{"type":"content_block_delta","index":{self._index},'
                '"delta":{"type":"text_delta","text":'
            ).encode()
        return out + _event("content_block_start", {"index": self._index, "content_block": block})

    def _stop(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return _event("content_block_stop", {"index": self._index})

    def render(self, event: dict[str, Any]) -> bytes:
        """The stream events a task event becomes (b"" for those Anthropic has none for)."""
        kind = event["type"]
        if kind == "response.output_text.delta":
            out = b"" if self._open == "text" else self._start({"type": "text", "text": ""}, "text")
            text = json.dumps(event["delta"], ensure_ascii=False).encode()
            return out + self._text_prefix + text + b"}}\n\n"
        if kind == "response.output_item.added" and event["item"]["type"] == "function_call":
            item = event["item"]
            self._calls.add(item["id"])
            block = {
                "type": "tool_use",
                "id": tool_use_id(item["call_id"]),
                "name": item["name"],
                "input": {},
            }
            return self._start(block, item["id"])
        if kind == "response.function_call_arguments.delta" and event["item_id"] in self._calls:
            delta = {"type": "input_json_delta", "partial_json": event["delta"]}
            return _event("content_block_delta", {"index": self._index, "delta": delta})
        if kind == "response.output_item.done" and self._open == event["item"].get("id"):
            return self._stop()
        if kind in ("response.completed", "response.incomplete"):
            self.finished = True
            response = event["response"]
            used = response.get("usage") or {}
            cached = (used.get("input_tokens_details") or {}).get("cached_tokens", 0)
            delta = stop_delta(response)
            counts = usage(used.get("input_tokens", 0), used.get("output_tokens", 0), cached)
            return (
                self._stop()
                + _event("message_delta", {"delta": delta, "usage": counts})
                + _event("message_stop", {})
            )
        if kind in ("response.failed", "response.cancelled"):
            self.finished = True
            error = (event.get("response") or {}).get("error") or {}
            message = (
                "The message was cancelled before it finished."
                if kind == "response.cancelled"
                else error.get("message", "The generation failed.")
            )
            return _event("error", {"error": {"type": "api_error", "message": message}})
        if kind == "error":  # never committed: the service stopping first (api/stopping.py)
            self.finished = True
            error = event["error"]
            kind = _STREAMED_ERROR_TYPES.get(error["code"], "api_error")
            payload = {"type": kind, "message": error["message"], "code": error["code"]}
            return _event("error", {"error": payload})
        return b""
