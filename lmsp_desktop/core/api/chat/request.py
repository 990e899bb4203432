"""The Chat Completions parser: `POST /v1/chat/completions` bodies into the task request."""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.api import fields
from lmsp_desktop.core.api.fields import content_text, unsupported
from lmsp_desktop.core.api.task_request import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, task_request
from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.tools.fields import parse_tool_fields

CHAT_API = "chat.completions"
ROLES = ("system", "developer", "user", "assistant", "tool")

_REFUSED: fields.Refused = {
    "logprobs": ((None, False), "This service does not return log probabilities."),
    "top_logprobs": ((None, 0), "This service does not return log probabilities."),
    "logit_bias": ((None, {}), "Logit bias is not supported."),
    "audio": ((None,), "Audio output is not supported."),
    "modalities": ((None, ["text"]), "Only text output is supported."),
    "prediction": ((None,), "Predicted outputs are not supported."),
    "web_search_options": ((None,), "Web search is not available here."),
}


def parse_chat(body: Any, default_on_restart: str) -> dict[str, Any]:
    """The normalised request of a chat completion (unknown fields are ignored)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    model = fields.model(body)
    if "messages" not in body:
        raise invalid("`messages` is required: a list of chat messages.", "messages")
    messages = parse_messages(body["messages"])
    n = fields.optional_int(body, "n", 1, 128)
    if n not in (None, 1):
        raise unsupported(
            "Only one choice per request is supported: send `n: 1` or leave it out.", "n"
        )
    fields.refuse(body, _REFUSED)
    stream, include_usage = fields.streaming(body)
    max_tokens = fields.optional_int(body, "max_tokens", 1, 1_000_000)
    max_completion = fields.optional_int(body, "max_completion_tokens", 1, 1_000_000)
    effort = body.get("reasoning_effort")
    if effort is not None and not isinstance(effort, str):
        raise invalid("`reasoning_effort` must be a string.", "reasoning_effort")
    echoed = fields.echoed({k: v for k, v in body.items() if k not in ("reasoning", "include")})
    echoed["reasoning"] = {"effort": effort} if effort else None
    return task_request(
        {"stream_options": {"include_usage": include_usage}},
        api=CHAT_API,
        via="Chat Completions (POST /v1/chat/completions)",
        model=model,
        messages=messages,
        temperature=fields.number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, 2.0),
        top_p=fields.number(body, "top_p", DEFAULT_TOP_P, 0.0, 1.0),
        presence_penalty=fields.number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=fields.number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        # max_completion_tokens is the newer name of max_tokens; it wins when both are sent.
        max_output_tokens=max_completion if max_completion is not None else max_tokens,
        seed=fields.optional_int(body, "seed", -(2**63), 2**63 - 1),
        stream=stream,
        store=fields.flag(body, "store", True),
        metadata=fields.metadata(body),
        on_restart=fields.on_restart(body, default_on_restart),
        user=fields.optional_str(body, "user"),
        stop=fields.stop(body.get("stop")),
        **echoed,
        **parse_tool_fields(body, CHAT_API),
    )


def parse_messages(value: Any) -> list[dict[str, Any]]:
    """Chat messages in the shared shape: text content, assistant `tool_calls` as
    {call_id, name, arguments}, tool results as {role: tool, call_id, content}."""
    if not isinstance(value, list) or not value:
        raise invalid("`messages` must be a non-empty list of chat messages.", "messages")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(value)]


def _message(message: Any, where: str) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise invalid(f"{where} must be an object with `role` and `content`.", where)
    role = message.get("role")
    if role == "function":
        raise unsupported(
            f"{where}.role `function` is the retired form of tool results; send a `tool` "
            "message with `tool_call_id`.",
            f"{where}.role",
        )
    if role not in ROLES:
        raise invalid(f"{where}.role must be one of {', '.join(ROLES)}.", f"{where}.role")
    content = message.get("content")
    if role == "assistant":
        calls = _tool_calls(message.get("tool_calls"), where)
        text = "" if content is None else content_text(content, where)
        if calls:
            return {"role": "assistant", "content": text, "tool_calls": calls}
        if content is None:
            raise invalid(f"{where}.content is required without `tool_calls`.", f"{where}.content")
        return {"role": "assistant", "content": text}
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise invalid(
                f"{where}.tool_call_id must name the tool call this message answers.",
                f"{where}.tool_call_id",
            )
        return {"role": "tool", "call_id": call_id, "content": content_text(content, where)}
    return {"role": role, "content": content_text(content, where)}


def _tool_calls(value: Any, where: str) -> list[dict[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(f"{where}.tool_calls must be a list.", f"{where}.tool_calls")
    calls = []
    for j, call in enumerate(value):
        at = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments", ""), str)
        ):
            raise invalid(
                f"{at} must be {{id, type: function, function: {{name, arguments}}}}.", at
            )
        calls.append(
            {
                "call_id": call["id"],
                "name": function["name"],
                "arguments": function.get("arguments", ""),
            }
        )
    return calls
