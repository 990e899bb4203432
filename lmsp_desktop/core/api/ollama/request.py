"""Ollama's `/api/chat` and `/api/generate` bodies into the task request.

As Ollama documents them: `model`, `messages` (chat; roles system, user, assistant with
`tool_calls`, tool with `tool_name`) or `prompt` and `system` (generate), `stream` (true
unless false), `format` ("json" or a JSON Schema, generated under the grammar), `tools`
(chat, with the LMSP extension `tool_choice` as on Chat Completions), `keep_alive`, and
`options` num_predict, temperature, top_p, top_k, seed, stop,
num_ctx, presence_penalty, frequency_penalty, and `truncate` (true unless false: an input
longer than the context is made to fit as Ollama does, truncate.py). A chat's final
assistant message is continued (a prefill), as Ollama does. Other options (repeat_penalty,
num_thread, mirostat, …) tune Ollama's own runner and are accepted and noted. Images, `raw`, custom
`template`s and `suffix` answer 400 naming the field, and so does `think` (true or a level),
in Ollama's words for a model that cannot think (no model here gives its thinking apart),
once the model is found: an unknown model answers 404 first, as in Ollama (NoThinking). A
chat without messages or a generate without a prompt loads the model (`keep_alive` 0:
unloads it), as in Ollama (LoadRequest).
"""

from __future__ import annotations

import json
import re
from typing import Any

from lmsp_desktop.core.api import fields
from lmsp_desktop.core.api.fields import unsupported
from lmsp_desktop.core.api.task_request import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, task_request
from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.tools.fields import CHAT, check_schema, parse_tool_fields

OLLAMA_API = "ollama"
CHAT_ENDPOINT = "chat"
GENERATE_ENDPOINT = "generate"
ROLES = ("system", "user", "assistant", "tool")
# Options that shape what is generated; the rest only tune Ollama's runner.
_USED_OPTIONS = {
    "num_predict", "temperature", "top_p", "top_k", "seed", "stop", "num_ctx",
    "presence_penalty", "frequency_penalty",
}  # fmt: skip
# Ollama's duration strings: "5m", "1h30m", "10s", "250ms".
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|m|s))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_ollama_chat(body: Any, default_on_restart: str) -> dict[str, Any]:
    """The task request of a `POST /api/chat` body."""
    body = _object(body)
    if body.get("messages") is None:
        body = {**body, "messages": []}
    messages = _messages(body["messages"])
    if not messages:  # Ollama's way to load (or, with keep_alive 0, unload) a model
        raise _loading(body, CHAT_ENDPOINT, "`messages` must hold at least one message.")
    tools = body.get("tools")
    return _task(body, default_on_restart, CHAT_ENDPOINT, messages, tools)


def parse_ollama_generate(body: Any, default_on_restart: str) -> dict[str, Any]:
    """The task request of a `POST /api/generate` body (the prompt goes through the model's
    chat template, with `system` as its system message, as Ollama does)."""
    body = _object(body)
    for name, why in (
        ("raw", "Raw prompts (without the chat template) are not supported here"),
        ("template", "Custom prompt templates are not supported here: the model's own is used"),
        ("suffix", "Fill-in-the-middle (`suffix`) is not supported on /api/generate here"),
        ("context", "The `context` of an earlier answer is not supported: send /api/chat turns"),
    ):
        if body.get(name) not in (None, False, "", []):
            raise unsupported(f"{why}. Leave `{name}` out.", name)
    _no_images(body, "images")
    prompt = body.get("prompt")
    if prompt in (None, "") and not body.get("system"):
        # Ollama's way to load (or, with keep_alive 0, unload) a model.
        raise _loading(body, GENERATE_ENDPOINT, "`prompt` is required: the text to answer.")
    if not isinstance(prompt, str) or not prompt:
        raise invalid("`prompt` is required: the text to answer.", "prompt")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise invalid("`system` must be a string.", "system")
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    return _task(body, default_on_restart, GENERATE_ENDPOINT, messages, None)


class LoadRequest(LmspError):
    """A chat without messages or a generate without a prompt: Ollama loads the model (with
    `keep_alive` 0: unloads it) and answers `done` without generating. Raised by the parsers
    before anything is stored, caught by the routes (routes.py), which do the load; a caller
    that does not catch it answers the 400 it carries (a task needs something to answer)."""

    def __init__(
        self, message: str, param: str, model: str, endpoint: str, keep_alive: float | None
    ) -> None:
        super().__init__(message, code="invalid_value", param=param)
        self.model = model
        self.endpoint = endpoint
        self.keep_alive_s = keep_alive

    @classmethod
    def of(cls, body: dict[str, Any], endpoint: str, message: str) -> LoadRequest:
        param = "messages" if endpoint == CHAT_ENDPOINT else "prompt"
        keep_alive = keep_alive_seconds(body.get("keep_alive"))
        return cls(message, param, fields.model(body), endpoint, keep_alive)

    @property
    def unloads(self) -> bool:
        return self.keep_alive_s == 0


class NoThinking(LmspError):
    """`think` asked of the model `model`: 400 `"<model>" does not support thinking`, answered
    once the model is found. Ollama looks the model up before it checks what the model can
    do, so an unknown model answers 404 `model not found` whether or not `think` is sent
    (clients that retry without `think` on the 400 would otherwise retry in vain). Raised by
    the parsers before anything is stored, caught by the routes (routes.py), which look the
    model up as a create does and then raise it; a caller that does not catch it answers the
    400 it carries."""

    def __init__(self, message: str, model: str) -> None:
        super().__init__(message, code="unsupported_parameter", param="think")
        self.model = model


def _loading(body: dict[str, Any], endpoint: str, message: str) -> LoadRequest:
    """The load (or unload) a body without input asks for. A load asking for thinking is
    refused (NoThinking, once the model is found), as Ollama refuses it; an unload is not
    (Ollama unloads before it looks)."""
    load = LoadRequest.of(body, endpoint, message)
    if not load.unloads:
        _no_thinking(body)
    return load


def _no_thinking(body: dict[str, Any]) -> None:
    """`think`: true, or a level ("high", "medium", "low"), asks for the model's thinking apart
    from its answer, which no model here gives. Ollama answers a model that cannot think with
    400 `"<model>" does not support thinking` (clients look for those words and ask again
    without it); so does this service. False or absent: nothing asked."""
    think = body.get("think")
    if think is None or think is False:
        return
    if not isinstance(think, bool | str):
        raise invalid('`think` must be true, false or a level such as "high".', "think")
    model = fields.model(body)
    raise NoThinking(
        f'"{model}" does not support thinking: no model here gives its thinking '
        "apart from its answer. Leave `think` out, or send false.",
        model,
    )


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    return body


def _task(
    body: dict[str, Any],
    default_on_restart: str,
    endpoint: str,
    messages: list[dict[str, Any]],
    tools: Any,
) -> dict[str, Any]:
    _no_thinking(body)
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise invalid("`options` must be an object.", "options")
    stream = fields.flag(body, "stream", True)
    # `tool_choice` is not Ollama's: an LMSP extension, as on Chat Completions, so that a
    # client can force a call (whose arguments then follow the tool's schema).
    choice = body.get("tool_choice") if tools else None
    tool_fields = parse_tool_fields({"tools": tools, "tool_choice": choice}, CHAT)
    tool_fields["text_format"] = _format(body.get("format"), tool_fields["schema_notes"])
    num_predict = _option_int(options, "num_predict", -2, 1_000_000)
    top_k = _option_int(options, "top_k", 0, 1_000_000)
    num_ctx = _option_int(options, "num_ctx", 1, 10_000_000)
    keep_alive = keep_alive_seconds(body.get("keep_alive"))
    notes = [
        f"`options.{name}` is not used by this service."
        for name in sorted(options)
        if name not in _USED_OPTIONS
    ]
    if num_ctx:
        notes.append(
            f"`options.num_ctx` {num_ctx} is not applied: the model runs with its own context."
        )
    # An input longer than the context is made to fit as Ollama's server does it (the
    # intakes' truncate.shorten_like_ollama), unless `truncate` is false (then: 400
    # context_length_exceeded).
    truncates = fields.flag(body, "truncate", True)
    return task_request(
        {"ollama": {"endpoint": endpoint, "num_ctx": num_ctx}},
        api=OLLAMA_API,
        via=f"Ollama (POST /api/{endpoint})",
        model=fields.model(body),
        messages=messages,
        temperature=_option_number(options, "temperature", DEFAULT_TEMPERATURE, 0.0, 2.0),
        top_p=_option_number(options, "top_p", DEFAULT_TOP_P, 0.0, 1.0),
        top_k=top_k,
        presence_penalty=_option_number(options, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_option_number(options, "frequency_penalty", 0.0, -2.0, 2.0),
        # -1: no limit; -2: until the context is full (both: no limit of our own).
        max_output_tokens=num_predict if num_predict is not None and num_predict > 0 else None,
        seed=_option_int(options, "seed", -(2**63), 2**63 - 1),
        stop=_stops(options.get("stop")),
        stream=stream,
        on_restart=fields.on_restart(body, default_on_restart),
        keep_alive_s=keep_alive,
        notes=notes,
        truncation="auto" if truncates else "disabled",
        **tool_fields,
    )


# -- messages --------------------------------------------------------------------------------
def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise invalid("`messages` must be a list of chat messages.", "messages")
    out: list[dict[str, Any]] = []
    # Ollama's tool results name the tool, not the call: each answers the oldest call of
    # that name (or, without a name, the oldest call) not answered yet.
    open_calls: list[dict[str, str]] = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(f"{where} must be an object with `role` and `content`.", where)
        role = message.get("role")
        if role not in ROLES:
            raise invalid(f"{where}.role must be one of {', '.join(ROLES)}.", f"{where}.role")
        _no_images(message, f"{where}.images")
        content = message.get("content", "")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise invalid(f"{where}.content must be a string.", f"{where}.content")
        if role == "assistant" and message.get("tool_calls"):
            calls = _tool_calls(message["tool_calls"], where, len(open_calls) + i)
            open_calls.extend(calls)
            out.append({"role": "assistant", "content": content, "tool_calls": calls})
        elif role == "tool":
            name = message.get("tool_name") or message.get("name")
            answered = next(
                (c for c in open_calls if not name or c["name"] == name),
                None,
            )
            if answered is not None:
                open_calls.remove(answered)
            call_id = answered["call_id"] if answered else f"call_{i}"
            out.append({"role": "tool", "call_id": call_id, "content": content})
        else:
            out.append({"role": role, "content": content})
    if out and out[-1]["role"] == "assistant" and not out[-1].get("tool_calls"):
        # A final assistant message is continued, as Ollama does (its templates leave the last
        # assistant turn open): llama_chat.PREFILL.
        out[-1]["prefill"] = True
    return out


def _tool_calls(value: Any, where: str, first: int) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise invalid(f"{where}.tool_calls must be a list.", f"{where}.tool_calls")
    calls = []
    for j, call in enumerate(value):
        at = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid(f"{at} must be {{function: {{name, arguments}}}}.", at)
        arguments = function.get("arguments", {})
        if not isinstance(arguments, dict | str):
            raise invalid(f"{at}.function.arguments must be an object.", f"{at}.function")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append({"call_id": f"call_{first + j}", "name": function["name"], "arguments": text})
    return calls


def _no_images(body: dict[str, Any], param: str) -> None:
    if body.get("images"):
        raise unsupported(
            "Images are not supported: the models here read text only. Leave `images` out.",
            param,
        )


# -- options and format ------------------------------------------------------------------------
def _option_number(
    options: dict[str, Any], name: str, default: float, lo: float, hi: float
) -> float:
    try:
        return fields.number(options, name, default, lo, hi)
    except Exception as exc:
        raise invalid(
            f"`options.{name}` must be a number from {lo} to {hi}.", f"options.{name}"
        ) from exc


def _option_int(options: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    try:
        return fields.optional_int(options, name, lo, hi)
    except Exception as exc:
        raise invalid(
            f"`options.{name}` must be a whole number from {lo} to {hi}.", f"options.{name}"
        ) from exc


def _stops(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise invalid("`options.stop` must be a list of non-empty strings.", "options.stop")
    return list(stops)


def _format(value: Any, notes: list[str]) -> dict[str, Any]:
    """`format`: "json" (any JSON object) or a JSON Schema (not strict: keywords the grammar
    cannot enforce are left out and noted)."""
    if value in (None, ""):
        return {"type": "text"}
    if value == "json":
        return {"type": "json_object"}
    if not isinstance(value, dict):
        raise invalid('`format` must be "json" or a JSON Schema object.', "format")
    check_schema(value, "format", False, notes)
    return {
        "type": "json_schema",
        "name": "format",
        "description": None,
        "schema": value,
        "strict": False,
    }


def keep_alive_seconds(value: Any) -> float | None:
    """Ollama's `keep_alive`: seconds as a number, a duration ("5m", "1h30m", "0"), or a
    negative value for "keep it loaded"; None when not sent (the service's idle timeout)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise invalid('`keep_alive` must be a duration such as "5m", or seconds.', "keep_alive")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+(?:\.\d+)?", text):
            return float(text)
        if text.startswith("-"):
            return -1.0
        if _DURATION.match(text):
            return sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION_PART.findall(text))
    raise invalid('`keep_alive` must be a duration such as "5m", or seconds.', "keep_alive")
