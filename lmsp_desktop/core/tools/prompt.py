"""How tools and tool turns reach the model: through its own chat template when the template
takes `tools` and speaks the `<tool_call>` format, else through the generic prompt below.

The generic prompt follows the Hermes / Qwen format that llama.cpp's common/chat.cpp also
parses: the functions are listed as JSON inside `<tools>…</tools>` in the system message, a
call is `<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>`, and a result comes back
inside `<tool_response>…</tool_response>`. Many small chat models have seen that format, and
it leaves plain text free, so `auto` can answer in words or call a function. docs/clients.md
documents it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jinja2

OPEN = "<tool_call>"
CLOSE = "</tool_call>"

GENERIC_INTRO = (
    "You can call functions to help you answer. The functions, with their parameters as "
    "JSON Schema, are:\n<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with this and nothing else:\n"
    '<tool_call>\n{{"name": "<function name>", "arguments": {{<arguments as JSON>}}}}\n'
    "</tool_call>\n"
    "The result comes back in a <tool_response> block; then answer the user."
)
REQUIRED_NOTE = "You must call one of the functions now."
NAMED_NOTE = "You must call the function {name} now."
JSON_NOTE = "Answer with a JSON object only."
SCHEMA_NOTE = "Answer with a JSON object only, matching this JSON Schema:\n{schema}"


def template_takes_tools(template: str, environment: jinja2.Environment) -> bool:
    """Whether a chat template renders a `tools` variable in the `<tool_call>` format (the
    only tool-call format the parser reads); other templates get the generic prompt. Parsed
    in `environment`, the one the template renders in (llama_chat.chat_environment), whose
    extensions know tags a plain environment cannot parse (`{% generation %}`, `{% break %}`)."""
    import jinja2.meta

    try:
        names = jinja2.meta.find_undeclared_variables(environment.parse(template))
    except jinja2.TemplateSyntaxError:
        return False
    return "tools" in names and OPEN in template


def function_json(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool as chat templates and the generic prompt show it."""
    shown: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description"):
        shown["description"] = tool["description"]
    shown["parameters"] = tool["parameters"]
    return shown


def template_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tools in the shape Hugging Face chat templates expect."""
    return [{"type": "function", "function": function_json(t)} for t in tools]


def call_text(call: dict[str, Any]) -> str:
    """One tool call as the model writes it (arguments as the JSON object they encode)."""
    try:
        arguments: Any = json.loads(call.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = call.get("arguments")
    payload = json.dumps({"name": call["name"], "arguments": arguments}, ensure_ascii=False)
    return f"{OPEN}\n{payload}\n{CLOSE}"


def tools_listing(tools: list[dict[str, Any]]) -> str:
    """The generic prompt's system text that lists the functions and the call format."""
    listing = "\n".join(json.dumps(function_json(t), ensure_ascii=False) for t in tools)
    return GENERIC_INTRO.format(tools=listing)


def output_notes(request: dict[str, Any]) -> str:
    """What the model is told about the expected output: a forced call, a JSON answer. The
    grammar enforces it; the words help a small model fill it with sensible values."""
    parts = []
    choice = request.get("tool_choice")
    if request.get("tools") and isinstance(choice, dict):
        parts.append(NAMED_NOTE.format(name=choice["name"]))
    elif request.get("tools") and choice == "required":
        parts.append(REQUIRED_NOTE)
    fmt = request.get("text_format") or {}
    if fmt.get("type") == "json_object":
        parts.append(JSON_NOTE)
    elif fmt.get("type") == "json_schema":
        parts.append(SCHEMA_NOTE.format(schema=json.dumps(fmt["schema"], ensure_ascii=False)))
    return "\n".join(parts)


def with_system_text(
    messages: list[dict[str, Any]], text: str, *, first: bool = False
) -> list[dict[str, Any]]:
    """`text` added to the leading system message (after its text, or before it with
    `first`), or as a new first system message."""
    if not text:
        return messages
    out = list(messages)
    if out and out[0].get("role") in ("system", "developer"):
        old = out[0].get("content") or ""
        joined = f"{text}\n\n{old}" if first else f"{old}\n\n{text}"
        out[0] = {**out[0], "content": joined.strip()}
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def generic_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool turns as plain chat turns for templates without tool support: an assistant's
    calls become `<tool_call>` blocks in its text, and consecutive tool results one user
    turn of `<tool_response>` blocks (most templates want user and assistant to alternate)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            blocks = [call_text(c) for c in message["tool_calls"]]
            text = "\n".join([message.get("content") or "", *blocks]).strip()
            out.append({"role": "assistant", "content": text})
        elif role == "tool":
            block = f"<tool_response>\n{message.get('content', '')}\n</tool_response>"
            if out and out[-1].get("tool_results"):
                out[-1] = {**out[-1], "content": f"{out[-1]['content']}\n{block}"}
            else:
                out.append({"role": "user", "content": block, "tool_results": True})
        else:
            out.append(message)
    return [{k: v for k, v in m.items() if k != "tool_results"} for m in out]


def native_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool turns in the shape Hugging Face chat templates read."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                try:
                    arguments: Any = json.loads(call.get("arguments") or "{}")
                except json.JSONDecodeError:
                    arguments = call.get("arguments")
                calls.append(
                    {
                        "id": call.get("call_id"),
                        "type": "function",
                        "function": {"name": call["name"], "arguments": arguments},
                    }
                )
            out.append(
                {"role": "assistant", "content": message.get("content") or "", "tool_calls": calls}
            )
        elif message.get("role") == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.get("call_id"),
                    "content": message.get("content", ""),
                }
            )
        else:
            out.append(message)
    return out


def render_inputs(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, native: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and `tools` to hand the chat template: `native` when the template takes
    tools (template_takes_tools), else the generic prompt's listing and plain tool turns."""
    if native and tools:
        return native_turns(messages), template_tools(tools)
    if not tools:
        return generic_turns(messages), None
    return with_system_text(generic_turns(messages), tools_listing(tools), first=True), None
