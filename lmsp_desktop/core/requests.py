"""Validation of `POST /v1/responses` bodies into a NewTask: every error names its field."""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.tool_fields import parse_tool_fields

# Sampling defaults when a request leaves them out (llama.cpp's own defaults); the response
# reports the values actually used.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_P = 0.95
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")


def unsupported(message: str, param: str) -> LmspError:
    return LmspError(message, code="unsupported_parameter", param=param, status=400)


def parse_messages(value: Any) -> list[dict[str, Any]]:
    """`input` as a string, or a list of messages / Open Responses message items, with tool
    turns: `function_call` items (consecutive ones become one assistant turn with
    `tool_calls`) and `function_call_output` items (a `tool` message)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise invalid("`input` must be a string or a non-empty list of messages.", "input")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"{where} must be an object with `role` and `content`.", where)
        kind = item.get("type", "message")
        if kind in ("function_call", "function_call_output"):
            _tool_turn(messages, item, where)
            continue
        if kind != "message":
            raise unsupported(
                f"{where} has type {kind!r}; this service accepts message, function_call and "
                "function_call_output items.",
                f"{where}.type",
            )
        role = item.get("role")
        if role not in ROLES:
            raise invalid(f"{where}.role must be one of {', '.join(ROLES)}.", f"{where}.role")
        messages.append({"role": role, "content": _content_text(item.get("content"), where)})
    return messages


def _tool_turn(messages: list[dict[str, Any]], item: dict[str, Any], where: str) -> None:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.call_id must name the function call.", f"{where}.call_id")
    if item["type"] == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else _content_text(output, f"{where}.output")
        messages.append({"role": "tool", "call_id": call_id, "content": text})
        return
    name, arguments = item.get("name"), item.get("arguments")
    if not isinstance(name, str) or not name:
        raise invalid(f"{where}.name must be the function's name.", f"{where}.name")
    if not isinstance(arguments, str):
        raise invalid(f"{where}.arguments must be a JSON string.", f"{where}.arguments")
    call = {"call_id": call_id, "name": name, "arguments": arguments}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _content_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(
            f"{where}.content must be a string or a list of text parts.", f"{where}.content"
        )
    texts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise invalid(f"{at} must be an object with a `type`.", at)
        if part["type"] not in TEXT_PARTS:
            raise unsupported(
                f"{at} is {part['type']!r}, but the models here read text only. "
                "Send the content as input_text.",
                f"{at}.type",
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise invalid(f"{at}.text must be a string.", f"{at}.text")
        texts.append(text)
    return "".join(texts)


def _number(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise invalid(f"`{name}` must be a number from {lo} to {hi}.", name)
    return float(value)


def _optional_int(body: dict[str, Any], name: str, lo: int, hi: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type: 16.0 is the whole number 16
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid(f"`{name}` must be a whole number from {lo} to {hi}.", name)
    return value


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"`{name}` must be true or false.", name)
    return value


def _refuse_unsupported_output(body: dict[str, Any]) -> None:
    """Output features the models here cannot honour: a 400 naming the field rather than an
    answer that silently ignores what was asked for."""
    top_logprobs = body.get("top_logprobs")
    if top_logprobs not in (None, 0):
        raise unsupported(
            "This service does not return log probabilities; leave `top_logprobs` out.",
            "top_logprobs",
        )


def parse_create(body: Any, default_on_restart: str) -> dict[str, Any]:
    """The normalised request settings kept with the response (unknown fields are ignored)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("`model` is required: the id of a model from GET /v1/models.", "model")
    if "input" not in body:
        raise invalid("`input` is required: a string or a list of messages.", "input")
    messages = parse_messages(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("`instructions` must be a string.", "instructions")
    _refuse_unsupported_output(body)
    tool_settings = parse_tool_fields(body, "responses")
    if body.get("previous_response_id") is not None:
        raise unsupported(
            "`previous_response_id` is not supported; send the conversation in `input`.",
            "previous_response_id",
        )
    metadata = body.get("metadata")
    if metadata is None:
        metadata = {}
    if (
        not isinstance(metadata, dict)
        or len(metadata) > 16
        or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
            for k, v in metadata.items()
        )
    ):
        raise invalid("`metadata` must map up to 16 short strings to strings.", "metadata")
    on_restart = body.get("on_restart", default_on_restart)
    if not isinstance(on_restart, str) or on_restart not in {p.value for p in RestartPolicy}:
        raise invalid("`on_restart` must be fail, retry or resume.", "on_restart")
    truncation = body.get("truncation", "disabled")
    if truncation not in ("auto", "disabled"):
        raise invalid("`truncation` must be auto or disabled.", "truncation")
    return {
        "model": model,
        "messages": messages,
        "instructions": instructions,
        "temperature": _number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, 2.0),
        "top_p": _number(body, "top_p", DEFAULT_TOP_P, 0.0, 1.0),
        "presence_penalty": _number(body, "presence_penalty", 0.0, -2.0, 2.0),
        "frequency_penalty": _number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        "max_output_tokens": _optional_int(body, "max_output_tokens", 1, 1_000_000),
        "seed": _optional_int(body, "seed", -(2**63), 2**63 - 1),
        "stream": _flag(body, "stream", False),
        "background": _flag(body, "background", False),
        "store": _flag(body, "store", True),
        "metadata": metadata,
        "truncation": truncation,
        "on_restart": on_restart,
        **tool_settings,
    }


def chat_messages(request: dict[str, Any]) -> list[dict[str, str]]:
    """The messages the model sees: `instructions` first as a system message."""
    messages = list(request["messages"])
    if request.get("instructions"):
        messages.insert(0, {"role": "system", "content": request["instructions"]})
    return messages
