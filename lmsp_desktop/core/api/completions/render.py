"""Legacy completions answers rendered from a task: the `text_completion` from its row,
`data: {text_completion}` lines from its committed events, then `[DONE]`."""

from __future__ import annotations

import json
from collections.abc import Sequence
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
    return {
        "id": row["id"],
        "object": "text_completion",
        "created": row["created_at"],
        "model": row["model"],
        "choices": [_choice(row, 0)],
        "usage": _usage(row["input_tokens"], row["output_tokens"]),
        "system_fingerprint": None,
        "task": task_object(row),
    }


def choices_object(rows: Sequence[RowLike]) -> dict[str, Any]:
    """The `text_completion` of a request answered by several tasks, one per choice (in
    `index` order: prompt × n + j): the first task's id, each choice's text, the usage
    summed, and every choice's task (`tasks`, LMSP) beside the first's (`task`)."""
    answer = completion_object(rows[0])
    answer["choices"] = [_choice(row, index) for index, row in enumerate(rows)]
    answer["usage"] = _usage(
        sum(int(row["input_tokens"]) for row in rows),
        sum(int(row["output_tokens"]) for row in rows),
    )
    answer["tasks"] = [task_object(row) for row in rows]
    return answer


def _choice(row: RowLike, index: int) -> dict[str, Any]:
    request = json.loads(row["request"])
    text = build_response(row)["output_text"]
    if request.get("echo"):
        text = request["prompt"] + text
    return {
        "text": text,
        "index": index,
        "logprobs": None,
        "finish_reason": finish_reason(row["state"]),
    }


class CompletionChunks:
    """Turns one task's committed events into `data:` lines of `text_completion` chunks.
    Text deltas are the hot path: a fixed prefix and suffix around each delta's JSON.

    A request answered by several tasks (choices.py) renders each with its choice's `index`,
    every chunk under the first task's id (`row`), and `whole` false: its ending is the
    choice's last chunk only (its usage kept in `usage`), the usage and `[DONE]` being the
    whole stream's."""

    keepalive = sse.KEEPALIVE

    def __init__(
        self, row: RowLike, request: dict[str, Any], index: int = 0, whole: bool = True
    ) -> None:
        self.finished = False
        self.failed = False  # ended with an error chunk (failed, cancelled, service stopping)
        self.usage: dict[str, Any] = {}
        self._index = index
        self._whole = whole
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
        self._suffix = f',"index":{index},"logprobs":null,"finish_reason":null}}]}}\n\n'.encode()

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
            choice = {"text": "", "index": self._index, "logprobs": None, "finish_reason": reason}
            out = _data({**self._head, "choices": [choice]})
            used = response.get("usage") or {}
            self.usage = _usage(used.get("input_tokens", 0), used.get("output_tokens", 0))
            return out + self.tail([self.usage]) if self._whole else out
        if kind in ("response.failed", "response.cancelled"):
            self.finished = self.failed = True
            error = (event.get("response") or {}).get("error") or {}
            message = (
                "The completion was cancelled before it finished."
                if kind == "response.cancelled"
                else error.get("message", "The generation failed.")
            )
            code = "cancelled" if kind == "response.cancelled" else error.get("code", "failed")
            return _data({"error": {"type": "server_error", "code": code, "message": message}})
        if kind == "error":  # never committed: the service stopping first (api/stopping.py)
            self.finished = self.failed = True
            return _data({"error": event["error"]})
        return b""

    def tail(self, usages: list[dict[str, Any]]) -> bytes:
        """The stream's end once every choice has ended: the usage of them all (when asked
        for, `stream_options.include_usage`), then `[DONE]`."""
        if not self._include_usage:
            return DONE_LINE
        summed = _usage(
            *(sum(u.get(k, 0) for u in usages) for k in ("prompt_tokens", "completion_tokens"))
        )
        return _data({**self._head, "choices": [], "usage": summed}) + DONE_LINE


def _data(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()
