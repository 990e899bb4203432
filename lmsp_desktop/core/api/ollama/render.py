"""Ollama's answers: NDJSON lines (or one object) from a task's events, and the model
objects of `/api/tags`, `/api/ps` and `/api/show`.

Durations are nanoseconds, as Ollama's are, measured by the route while it follows the task:
`load_duration` until the task runs (queue and model load), `prompt_eval_duration` until the
first token, `eval_duration` from there to the end. The first token's time is the runner's
(when it was sampled), read at the first output the task commits: a text delta, or a tool
call's opening (whose text is held until the call is parsed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lmsp_desktop.core.models.info import ModelInfo
from lmsp_desktop.core.models.memory import Estimate

# The Ollama API level these routes follow (clients compare versions to pick features).
OLLAMA_VERSION = "0.12.0"
FOREVER = 4102444800.0 * 2  # a date past 2100


def iso_now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def line(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


@dataclass
class Clock:
    """The timing fields of one answer (perf_counter seconds, reported in nanoseconds)."""

    start: float = field(default_factory=time.perf_counter)
    running: float | None = None
    first_token: float | None = None

    def fields(self, input_tokens: int, output_tokens: int) -> dict[str, int]:
        end = time.perf_counter()
        running = self.running if self.running is not None else end
        first = self.first_token if self.first_token is not None else end

        def ns(seconds: float) -> int:
            return max(0, int(seconds * 1e9))

        return {
            "total_duration": ns(end - self.start),
            "load_duration": ns(running - self.start),
            "prompt_eval_count": input_tokens,
            "prompt_eval_duration": ns(first - running),
            "eval_count": output_tokens,
            "eval_duration": ns(end - first),
        }


class AnswerRenderer:
    """Turns one task's committed events into Ollama's answer: `render` gives the NDJSON
    lines of an event (b"" when it has none), `final` the one object of a `stream: false`
    answer. `failure` is set to the error text when the task fails or is cancelled."""

    keepalive = b""  # NDJSON has no comment line: Ollama's stream stays silent

    def __init__(
        self,
        model: str,
        endpoint: str,
        clock: Clock,
        first_token_at: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.model = model
        self.chat = endpoint == "chat"
        self.clock = clock
        # The runner's time (epoch seconds) of the task's first output token; None: unknown.
        self._first_token_at = first_token_at
        self.finished = False
        self.failure: str | None = None
        self.text: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self._last: dict[str, Any] = {}

    def opening(self) -> bytes:
        return b""

    def render(self, event: dict[str, Any]) -> bytes:
        kind = event["type"]
        if kind == "response.in_progress" and self.clock.running is None:
            self.clock.running = time.perf_counter()
        elif kind == "response.output_text.delta":
            self._output_began()
            self.text.append(event["delta"])
            return line(self._chunk(event["delta"], []))
        elif kind == "response.output_item.added" and event["item"].get("type") == "function_call":
            self._output_began()
        elif kind == "response.output_item.done" and event["item"].get("type") == "function_call":
            self._output_began()
            call = _tool_call(event["item"])
            self.calls.append(call)
            return line(self._chunk("", [call]))
        elif kind in ("response.completed", "response.incomplete"):
            self.finished = True
            return line(self.done(event["response"]))
        elif kind == "response.failed":
            self.finished = True
            error = event["response"].get("error") or {}
            self.failure = error.get("message") or "The generation failed."
            return line({"error": self.failure})
        elif kind == "response.cancelled":
            self.finished = True
            self.failure = "The request was cancelled before it finished."
            return line({"error": self.failure})
        elif kind == "error":  # never committed: the service stopping first (api/stopping.py)
            self.finished = True
            self.failure = str(event["error"]["message"])
            return line({"error": self.failure})
        return b""

    def _output_began(self) -> None:
        """The first output: the prompt's time ends at the first token, the runner's time of
        it when known (a call's first event comes once its name is parsed, tokens later)."""
        if self.clock.first_token is not None:
            return
        now = time.perf_counter()
        at = self._first_token_at()
        self.clock.first_token = now if at is None else now - max(0.0, time.time() - at)
        if self.clock.running is not None and self.clock.running > self.clock.first_token:
            self.clock.running = self.clock.first_token  # both came in one commit

    def done(self, response: dict[str, Any]) -> dict[str, Any]:
        """The last line: `done`, why, and the counts and durations."""
        usage = response.get("usage") or {}
        reason = "length" if response.get("status") == "incomplete" else "stop"
        body = self._chunk("", [])
        body.update(
            done=True,
            done_reason=reason,
            **self.clock.fields(usage.get("input_tokens", 0), usage.get("output_tokens", 0)),
        )
        self._last = body
        return body

    def final(self) -> dict[str, Any]:
        """The one object of a `stream: false` answer: the whole text and calls."""
        body = dict(self._last)
        text = "".join(self.text)
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.calls:
                message["tool_calls"] = self.calls
            body["message"] = message
        else:
            body["response"] = text
        return body

    def _chunk(self, text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "created_at": iso_now()}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            body["message"] = message
        else:
            body["response"] = text
        body["done"] = False
        return body


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    try:
        arguments = json.loads(item.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {"value": arguments}
    return {"function": {"name": item["name"], "arguments": arguments}}


# -- models ------------------------------------------------------------------------------------
def details(info: ModelInfo) -> dict[str, Any]:
    family = info.architecture or ""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": family,
        "families": [family] if family else None,
        "parameter_size": _parameter_size(info.parameters),
        "quantization_level": info.quantization or "",
    }


def tag(info: ModelInfo, name: str) -> dict[str, Any]:
    """One model of `GET /api/tags`, by the `name` that finds it (names.ollama_names)."""
    return {
        "name": name,
        "model": name,
        "modified_at": iso(info.mtime_ns / 1e9),
        "size": info.size_bytes,
        "digest": (info.digest or "").removeprefix("sha256:"),
        "details": details(info),
    }


def running(
    info: ModelInfo,
    name: str,
    expires_in: float | None,
    context_length: int | None,
    estimate: Estimate | None,
) -> dict[str, Any]:
    """One model of `GET /api/ps`, named as in `GET /api/tags`. As in Ollama, `size` is the
    memory the loaded model takes, RAM and GPU, and `size_vram` its GPU part: here the
    estimate of the plan it was loaded with (the `memory_estimate` of /v1/models, plus its
    GPU part; the worker's own use is not measured). Without a plan (a model the memory
    fitter does not size), the file's size and 0."""
    # Ollama shows a model kept "forever" (keep_alive -1) as expiring in the far future.
    expires = time.time() + expires_in if expires_in is not None else FOREVER
    size, on_gpu = (
        (info.size_bytes, 0) if estimate is None else (estimate.total + estimate.gpu, estimate.gpu)
    )
    return {
        **tag(info, name),
        "size": size,
        "expires_at": iso(expires),
        "size_vram": on_gpu,
        "context_length": context_length,
    }


def show(info: ModelInfo, context_length: int | None) -> dict[str, Any]:
    """`POST /api/show`: details, the header values clients read, the chat template. As in
    Ollama, `model_info` holds the file's header (`<arch>.context_length`: the trained
    length) and `parameters` the model's run settings: `num_ctx`, the context it runs with
    (Continue reads it over the header's)."""
    arch = info.architecture or "unknown"
    model_info: dict[str, Any] = {"general.architecture": arch}
    if info.parameters is not None:
        model_info["general.parameter_count"] = info.parameters
    if info.context_length is not None:
        model_info[f"{arch}.context_length"] = info.context_length
    return {
        "license": "",
        "modelfile": f"# Served by LMSP Desktop from {info.path.name}\nFROM {info.path.name}\n",
        "parameters": f"num_ctx {context_length}" if context_length else "",
        "template": info.chat_template or "",
        "details": details(info),
        "model_info": model_info,
        "capabilities": ["completion", "tools"],
        "modified_at": iso(info.mtime_ns / 1e9),
    }


def _parameter_size(parameters: int | None) -> str:
    if not parameters:
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if parameters >= size:
            value = parameters / size
            return f"{value:.1f}{unit}".replace(".0", "") if value < 100 else f"{value:.0f}{unit}"
    return str(parameters)
