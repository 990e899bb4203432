"""Legacy completions answers rendered from a task: the `text_completion` from its row,
`data: {text_completion}` lines from its committed events, then `[DONE]`."""

from __future__ import annotations

import json
from typing import Any

from lmsp_desktop.core.api.chat.render import DONE_LINE, chat_usage
from lmsp_desktop.core.api.resource import RowLike, build_response, task_object
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.service import sse
from lmsp_desktop.core.states import TaskState


def new_completion_id() -> str:
    """`cmpl-…`: the id of a completion and of its task."""
    return new_id("cmpl", sep="-")


def finish_reason(state: str) -> str:
    return "length" if TaskState(state) == TaskState.INCOMPLETE else "stop"


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    usage = chat_usage(input_tokens, output_tokens)
    return {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def completion_object(row: RowLike) -> dict[str, Any]:
    """The `text_completion` of a finished task (with the LMSP `task` object)."""
    request = json.loads(row["request"])
    response = build_response(row)
    text = response["output_text"]
    if request.get("echo"):
        text = request["prompt"] + text
    return {
        "id": row["id"],
        "object": "text_completion",
        "created": row["created_at"],
        "model": row["model"],
        "choices": [
            {
                "text": text,
                "index": 0,
                "logprobs": None,
                "finish_reason": finish_reason(row["state"]),
            }
        ],
        "usage": _usage(row["input_tokens"], row["output_tokens"]),
        "system_fingerprint": None,
        "task": task_object(row),
    }


class CompletionChunks:
    """Turns one task's committed events into `data:` lines of `text_completion` chunks.
    Text deltas are the hot path: a fixed prefix and suffix around each delta's JSON."""

    keepalive = sse.KEEPALIVE

    def __init__(self, row: RowLike, request: dict[str, Any]) -> None:
        self.finished = False
        self._echo = request["prompt"] if request.get("echo") else ""
        self._include_usage = bool(request["stream_options"]["include_usage"])
        self._head = {
            "id": row["id"],
            "object": "text_completion",
            "created": row["created_at"],
            "model": row["model"],
            "system_fingerprint": None,
        }
        head = json.dumps(self._head, separators=(",", ":"))[:-1]
        self._prefix = f'data: {head},"choices":[{{"text":'.encode()
        self._suffix = b',"index":0,"logprobs":null,"finish_reason":null}]}\n\n'

    def _text(self, text: str) -> bytes:
        return self._prefix + json.dumps(text, ensure_ascii=False).encode() + self._suffix

    def opening(self) -> bytes:
        """The echoed prompt first, when asked for (as OpenAI streams it)."""
        return self._text(self._echo) if self._echo else b""

    def render(self, event: dict[str, Any]) -> bytes:
        kind = event["type"]
        if kind == "response.output_text.delta":
            return self._text(event["delta"])
        if kind in ("response.completed", "response.incomplete"):
            self.finished = True
            response = event["response"]
            reason = "length" if kind == "response.incomplete" else "stop"
            choice = {"text": "", "index": 0, "logprobs": None, "finish_reason": reason}
            out = _data({**self._head, "choices": [choice]})
            if self._include_usage:
                used = response.get("usage") or {}
                counts = _usage(used.get("input_tokens", 0), used.get("output_tokens", 0))
                out += _data({**self._head, "choices": [], "usage": counts})
            return out + DONE_LINE
        if kind in ("response.failed", "response.cancelled"):
            self.finished = True
            error = (event.get("response") or {}).get("error") or {}
            message = (
                "The completion was cancelled before it finished."
                if kind == "response.cancelled"
                else error.get("message", "The generation failed.")
            )
            code = "cancelled" if kind == "response.cancelled" else error.get("code", "failed")
            return _data({"error": {"type": "server_error", "code": code, "message": message}})
        if kind == "error":  # never committed: the service stopping first (api/stopping.py)
            self.finished = True
            return _data({"error": event["error"]})
        return b""


def _data(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()
