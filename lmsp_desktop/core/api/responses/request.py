"""The Responses parser: `POST /v1/responses` bodies into the task request.

Every error names its field. Input items are kept as the client sent them (`input_items`);
`item_reference` items and `previous_response_id` need the store and are resolved after
parsing by conversation.resolve, which then fills `messages` (what the model sees).
"""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.api import fields
from lmsp_desktop.core.api.fields import content_text, unsupported
from lmsp_desktop.core.api.task_request import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, request_of
from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.tools.fields import parse_tool_fields

RESPONSES_API = "responses"

ROLES = ("user", "assistant", "system", "developer")
ITEM_TYPES = ("message", "item_reference", "function_call", "function_call_output")


def parse_input_items(value: Any) -> list[dict[str, Any]]:
    """`input` as Open Responses items: a string is one user message; messages get their
    content as a list of text parts; `item_reference`s are left for the resolver."""
    if isinstance(value, str):
        return [_message_item("user", value, None)]
    if not isinstance(value, list) or not value:
        raise invalid("`input` must be a string or a non-empty list of messages.", "input")
    items = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"{where} must be an object with `role` and `content`.", where)
        kind = item.get("type", "message")
        if kind not in ITEM_TYPES:
            raise unsupported(
                f"{where} has type {kind!r}; this service accepts message, item_reference, "
                "function_call and function_call_output items.",
                f"{where}.type",
            )
        items.append(_parse_item(kind, item, where))
    return items


def _parse_item(kind: str, item: dict[str, Any], where: str) -> dict[str, Any]:
    item_id = item.get("id") if isinstance(item.get("id"), str) else None
    if kind == "item_reference":
        if not item_id:
            raise invalid(f"{where}.id must be the id of a stored item.", f"{where}.id")
        return {"type": "item_reference", "id": item_id}
    if kind == "function_call":
        parsed = {
            "type": "function_call",
            "call_id": _string(item, "call_id", where),
            "name": _string(item, "name", where),
            "arguments": _string(item, "arguments", where, allow_empty=True),
        }
        return {**parsed, "id": item_id} if item_id else parsed
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else content_text(output, where)
        parsed = {
            "type": "function_call_output",
            "call_id": _string(item, "call_id", where),
            "output": text,
        }
        return {**parsed, "id": item_id} if item_id else parsed
    role = item.get("role")
    if role not in ROLES:
        raise invalid(f"{where}.role must be one of {', '.join(ROLES)}.", f"{where}.role")
    return _message_item(role, content_text(item.get("content"), where), item_id)


def _string(item: dict[str, Any], name: str, where: str, *, allow_empty: bool = False) -> str:
    value = item.get(name)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise invalid(f"{where}.{name} must be a string.", f"{where}.{name}")
    return value


def _message_item(role: str, text: str, item_id: str | None) -> dict[str, Any]:
    part = (
        {"type": "output_text", "text": text, "annotations": []}
        if role == "assistant"
        else {"type": "input_text", "text": text}
    )
    item: dict[str, Any] = {"type": "message", "role": role, "content": [part]}
    if item_id:
        item["id"] = item_id
    return item


def items_to_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Resolved items as the chat messages the model sees (tool turns as TEAM.md shapes them:
    consecutive function calls become one assistant turn with `tool_calls`)."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            parts = item["content"]
            if len(parts) == 1:  # as parse_input_items makes every message (B1)
                text = parts[0].get("text", "")
            else:
                text = "".join(p.get("text", "") for p in parts)
            messages.append({"role": item["role"], "content": text})
        elif kind == "function_call":
            call = {k: item[k] for k in ("call_id", "name", "arguments")}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "call_id": item["call_id"], "content": item["output"]})
        else:  # an unresolved item_reference: a bug in the caller's order of steps
            raise ValueError(f"unresolved input item {item!r}")
    return messages


def parse_create(body: Any, default_on_restart: str) -> dict[str, Any]:
    """The normalised request settings kept with the response (unknown fields are ignored)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    model = fields.model(body)
    if "input" not in body:
        raise invalid("`input` is required: a string or a list of messages.", "input")
    items = parse_input_items(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("`instructions` must be a string.", "instructions")
    tool_settings = parse_tool_fields(body, RESPONSES_API)
    top_logprobs = body.get("top_logprobs")
    if top_logprobs not in (None, 0):
        raise unsupported(
            "This service does not return log probabilities; leave `top_logprobs` out.",
            "top_logprobs",
        )
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise invalid(
            "`previous_response_id` must be the id of a stored response.", "previous_response_id"
        )
    if body.get("conversation") is not None:
        raise unsupported(
            "Conversations objects are not supported; chain turns with "
            "`previous_response_id` instead.",
            "conversation",
        )
    truncation = body.get("truncation", "disabled")
    if truncation is None:
        truncation = "disabled"
    if truncation not in ("auto", "disabled"):
        raise invalid("`truncation` must be auto or disabled.", "truncation")
    # The new input alone; conversation.resolve puts the earlier turns and referenced
    # items in before the task is created.
    own = [item for item in items if item["type"] != "item_reference"]
    # One dict of fields, not ~40 keyword arguments (B1: request_of).
    return request_of(
        {
            "api": RESPONSES_API,
            "via": "Responses (POST /v1/responses)",
            "model": model,
            "messages": items_to_messages(own),
            "input_items": items,
            "previous_response_id": previous,
            "instructions": instructions,
            "temperature": fields.number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, 2.0),
            "top_p": fields.number(body, "top_p", DEFAULT_TOP_P, 0.0, 1.0),
            "presence_penalty": fields.number(body, "presence_penalty", 0.0, -2.0, 2.0),
            "frequency_penalty": fields.number(body, "frequency_penalty", 0.0, -2.0, 2.0),
            "max_output_tokens": fields.optional_int(body, "max_output_tokens", 1, 1_000_000),
            "seed": fields.optional_int(body, "seed", -(2**63), 2**63 - 1),
            "stream": fields.flag(body, "stream", False),
            "background": fields.flag(body, "background", False),
            "store": fields.flag(body, "store", True),
            "metadata": fields.metadata(body),
            "truncation": truncation,
            "on_restart": fields.on_restart(body, default_on_restart),
            "user": fields.optional_str(body, "user"),
            **fields.echoed(body),
            **tool_settings,
        }
    )
