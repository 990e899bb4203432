"""The Anthropic Messages parser: `POST /v1/messages` bodies into the task request.

`system` (a string or text blocks) becomes the first system message; user turns' text blocks
their text, `tool_result` blocks tool messages; assistant turns' `tool_use` blocks their tool
calls; a final assistant turn of text is a prefill the answer continues. Tools (`input_schema`)
and `tool_choice` are mapped onto the shared tool fields, so a forced call (`any`, `tool`)
goes through the same plan as OpenAI's `required` / named.
Fields the service does not use, and `thinking`, are accepted and named in the task's notes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from lmsp_desktop.core.api import fields
from lmsp_desktop.core.api.fields import unsupported
from lmsp_desktop.core.api.task_request import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, task_request
from lmsp_desktop.core.errors import LmspError, invalid
from lmsp_desktop.core.tools.fields import RESPONSES, parse_tool_fields

ANTHROPIC_API = "anthropic.messages"
VIA = "Anthropic Messages (POST /v1/messages)"
# Fields this parser reads; any other is accepted, unused, and noted on the task.
KNOWN = {
    "model",
    "messages",
    "system",
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "stream",
    "metadata",
    "tools",
    "tool_choice",
    "thinking",
    "on_restart",
}
# Content blocks a model that reads text cannot take: a 400 that says what to send.
NOT_TEXT = ("image", "document", "search_result", "container_upload")


def parse_messages_request(body: Any, default_on_restart: str) -> dict[str, Any]:
    """The task request of a Messages body (`max_tokens` required, as Anthropic's)."""
    request = parse_common(body, default_on_restart)
    max_tokens = fields.optional_int(body, "max_tokens", 1, 1_000_000)
    if max_tokens is None:
        raise invalid("`max_tokens` is required: the most tokens to generate.", "max_tokens")
    request["max_output_tokens"] = max_tokens
    return request


def parse_common(body: Any, default_on_restart: str) -> dict[str, Any]:
    """What `/v1/messages` and `/v1/messages/count_tokens` share (the prompt and tools)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    model = fields.model(body)
    if "messages" not in body:
        raise invalid("`messages` is required: a list of user and assistant turns.", "messages")
    turns = body["messages"]
    messages = _system(body.get("system")) + _prefilled(parse_turns(turns), len(turns) - 1)
    notes = [f"`{name}` is not used by this service." for name in sorted(set(body) - KNOWN)]
    if body.get("thinking") not in (None, {"type": "disabled"}):
        notes.append("Extended thinking was asked for; the model answered without it.")
    top_k = fields.optional_int(body, "top_k", 0, 1_000_000)
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise invalid('`metadata` must be an object such as {"user_id": "..."}.', "metadata")
    user = (metadata or {}).get("user_id")
    return task_request(
        api=ANTHROPIC_API,
        via=VIA,
        model=model,
        messages=messages,
        # Anthropic's temperature runs from 0 to 1.
        temperature=fields.number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, 1.0),
        top_p=fields.number(body, "top_p", DEFAULT_TOP_P, 0.0, 1.0),
        top_k=top_k,
        stop=_stop_sequences(body.get("stop_sequences")),
        stream=fields.flag(body, "stream", False),
        on_restart=fields.on_restart(body, default_on_restart),
        user=user[:512] if isinstance(user, str) else None,
        notes=notes,
        **_tool_fields(body),
    )


# What the shared tool parser calls OpenAI's fields → Anthropic's names for them.
_FIELD = re.compile(r"(tools\[\d+\])\.parameters")
_WORDS = {
    "`tool_choice` is required but no function tools were sent.": (
        '`tool_choice` {"type": "any"} needs tools, and no `tools` were sent.'
    ),
}


def _anthropic_words(text: str) -> str:
    text = _WORDS.get(text, text)
    if text.startswith("`tool_choice` names the function "):  # {"type": "tool", "name"}
        text = text.replace("the function ", "the tool ", 1)
    return _FIELD.sub(r"\1.input_schema", text)


def _tool_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The shared tool fields; its errors and schema notes naming Anthropic's fields
    (`tools[0].input_schema…`, `tool_choice` `any`), not the OpenAI ones it parsed."""
    try:
        parsed = parse_tool_fields(_as_responses_tools(body), RESPONSES)
    except LmspError as exc:
        exc.message = _anthropic_words(exc.message)
        exc.args = (exc.message,)
        exc.param = _anthropic_words(exc.param) if exc.param else exc.param
        raise
    parsed["schema_notes"] = [_anthropic_words(note) for note in parsed["schema_notes"]]
    return parsed


def _stop_sequences(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise invalid("`stop_sequences` must be a list of non-empty strings.", "stop_sequences")
    return list(value)


def _system(value: Any) -> list[dict[str, Any]]:
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, str):
        return [{"role": "system", "content": value}]
    return [{"role": "system", "content": _text_blocks(value, "system")}]


def _text_blocks(value: Any, where: str) -> str:
    """Text blocks (or a string) as one text; anything but text is refused."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise invalid(f"`{where}` must be a string or a list of text blocks.", where)
    texts = []
    for i, block in enumerate(value):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in NOT_TEXT:
            raise _not_text(kind, at)
        if kind != "text" or not isinstance(block.get("text"), str):
            raise invalid(f"{at} must be a text block: {{type: text, text}}.", at)
        texts.append(block["text"])
    return "\n".join(texts)


def _not_text(kind: str, where: str) -> Exception:
    return unsupported(
        f"{where} is an {kind} block, but the models here read text only. Send the content "
        "as text blocks.",
        f"{where}.type",
    )


def parse_turns(value: Any) -> list[dict[str, Any]]:
    """User and assistant turns as the shared chat messages; a system turn among them (Claude
    Code sends one after the first user turn) as a system message there."""
    if not isinstance(value, list) or not value:
        raise invalid("`messages` must be a non-empty list of turns.", "messages")
    messages: list[dict[str, Any]] = []
    for i, turn in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant", "system"):
            raise invalid(f"{where}.role must be user, assistant or system.", f"{where}.role")
        content = turn.get("content")
        if turn["role"] == "system":
            messages.append({"role": "system", "content": _text_blocks(content, where)})
        elif isinstance(content, str):
            messages.append({"role": turn["role"], "content": content})
        elif isinstance(content, list):
            messages += _blocks(turn["role"], content, f"{where}.content")
        else:
            raise invalid(f"{where}.content must be a string or a list of blocks.", where)
    return messages


def _prefilled(messages: list[dict[str, Any]], last_turn: int) -> list[dict[str, Any]]:
    """A final assistant turn of text is a prefill, as Anthropic reads it: the answer goes on
    from its text (and does not repeat it) instead of starting a new turn. Its text cannot
    end with white space (Anthropic's 400: the model would write the space itself)."""
    last = messages[-1] if messages else {}
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return messages
    text = last.get("content") or ""
    if text != text.rstrip():
        raise invalid(
            "The final assistant content cannot end with trailing whitespace: it is a "
            "prefill the answer continues. Remove the trailing spaces or newlines.",
            f"messages[{last_turn}].content",
        )
    # llama_chat.PREFILL: the engine renders this turn left open.
    return [*messages[:-1], {**last, "prefill": True}]


def _blocks(role: str, blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """One turn's blocks: tool results first (each a tool message), then the text; an
    assistant's `tool_use` blocks become its tool calls."""
    texts: list[str] = []
    calls: list[dict[str, str]] = []
    results: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(block, at))
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, at))
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # the model's own earlier reasoning: not shown to it again
        elif kind in NOT_TEXT:
            raise _not_text(kind, at)
        else:
            raise invalid(
                f"{at} has type {kind!r}; a {role} turn takes text"
                + (
                    ", tool_use and thinking blocks."
                    if role == "assistant"
                    else " and tool_result blocks."
                ),
                f"{at}.type",
            )
    text = "".join(texts)
    if role == "assistant":
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return [message]
    return results + ([{"role": "user", "content": text}] if texts or not results else [])


def _tool_use(block: dict[str, Any], where: str) -> dict[str, str]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
        raise invalid(f"{where} must be {{type: tool_use, id, name, input: {{...}}}}.", where)
    return {"call_id": call_id, "name": name, "arguments": json.dumps(arguments)}


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.tool_use_id must name the tool_use it answers.", where)
    content = block.get("content", "")
    text = _text_blocks(content, f"{where}.content") if content else ""
    if block.get("is_error"):
        text = f"Error: {text}"
    return {"role": "tool", "call_id": call_id, "content": text}


def _as_responses_tools(body: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's `tools` and `tool_choice` in the Responses form the shared tool parser
    reads: custom tools as function tools (not strict unless asked), server tools as tool
    types the service cannot run (dropped and noted), `any` as required, `tool` as named."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise invalid("`tools` must be a list of tools.", "tools")
    converted = []
    for tool in tools or []:
        if isinstance(tool, dict) and tool.get("type") in (None, "custom"):
            converted.append(
                {
                    "type": "function",
                    "name": tool.get("name"),
                    "description": tool.get("description"),
                    "parameters": tool.get("input_schema"),
                    "strict": bool(tool.get("strict", False)),
                }
            )
        else:
            converted.append(tool)
    return {"tools": converted, "tool_choice": _tool_choice(body.get("tool_choice"))}


def _tool_choice(value: Any) -> Any:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "name": value.get("name")}
    raise invalid(
        '`tool_choice` must be {"type": "auto"}, {"type": "any"}, {"type": "none"} or '
        '{"type": "tool", "name": ...}.',
        "tool_choice",
    )
