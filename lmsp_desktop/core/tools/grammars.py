"""The output grammar of a request: tool calls that always parse (and, for strict tools,
match their schema) and structured output (`json_object`, `json_schema`).

- `required` or a named function: the output is one call block (several when parallel calls
  are allowed, at most `max_tool_calls`), nothing else.
- `auto` with a strict tool, or with a JSON output format: either the answer (free text, or
  the JSON the format asks for) or call blocks; a call that starts must complete.
- No tools offered: the JSON output format's grammar, or none for plain text.
Arguments of non-strict tools only have to be a JSON object.
"""

from __future__ import annotations

import json
from typing import Any

from lmsp_desktop.core.tools.prompt import CLOSE, OPEN
from lmsp_desktop.core.tools.schema import GrammarBuilder, literal


def offered_tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The function tools the model may call for this request (none for `tool_choice`
    none or `max_tool_calls` 0; only the allowed or named ones when restricted)."""
    tools: list[dict[str, Any]] = list(request.get("tools") or [])
    choice = request.get("tool_choice", "auto")
    if not tools or choice == "none" or request.get("max_tool_calls") == 0:
        return []
    allowed = request.get("allowed_tools")
    if allowed:
        tools = [t for t in tools if t["name"] in allowed]
    if isinstance(choice, dict):
        tools = [t for t in tools if t["name"] == choice.get("name")]
    return tools


def max_calls(request: dict[str, Any]) -> int | None:
    """How many calls one output may hold (None: no limit)."""
    limit = request.get("max_tool_calls")
    if not request.get("parallel_tool_calls", False):
        return 1
    return limit if isinstance(limit, int) else None


def output_grammar(request: dict[str, Any]) -> str | None:
    """GBNF for the request's output, or None when decoding is free."""
    tools = offered_tools(request)
    fmt = request.get("text_format") or {"type": "text"}
    choice = request.get("tool_choice", "auto")
    forced = bool(tools) and (choice == "required" or isinstance(choice, dict))
    strict = any(t.get("strict") for t in tools)
    json_format = fmt.get("type") in ("json_object", "json_schema")
    if tools and not (forced or strict or json_format):
        return None  # auto with loose tools and text: the parser reads what comes
    if not tools and not json_format:
        return None
    builder = GrammarBuilder()
    answer = _answer_rule(builder, fmt) if json_format else None
    if not tools:
        builder.rule("root", answer or "")
        return builder.text()
    calls = _calls_rule(builder, tools, max_calls(request))
    if forced:
        builder.rule("root", calls)
    else:
        builder.rule("free-text", _text_without(OPEN))
        builder.rule("root", f"{answer} | {calls}" if answer else f"free-text ({calls})?")
    return builder.text()


def _answer_rule(builder: GrammarBuilder, fmt: dict[str, Any]) -> str:
    if fmt.get("type") == "json_schema":
        return builder.schema(fmt["schema"], "answer-", "text.format.schema")
    return builder.any_json_object("answer-")


def _calls_rule(builder: GrammarBuilder, tools: list[dict[str, Any]], limit: int | None) -> str:
    alternatives = []
    for i, tool in enumerate(tools):
        prefix = f"t{i}-"
        if tool.get("strict"):
            arguments = builder.schema(tool["parameters"], prefix, f"tools[{i}].parameters")
        else:
            arguments = builder.any_json_object(prefix)
        head = f'{OPEN}\n{{"name": {json.dumps(tool["name"])}, "arguments": '
        tail = literal("}\n" + CLOSE)
        alternatives.append(builder.rule(f"call-{i}", f"{literal(head)} {arguments} {tail}"))
    builder.rule("call", " | ".join(alternatives))
    if limit == 1:
        repeat = ""
    elif limit is None:
        repeat = ' ("\\n" call)*'
    else:
        repeat = f' ("\\n" call){{0,{limit - 1}}}'
    return builder.rule("calls", f"call{repeat}")


def _text_without(tag: str) -> str:
    """Any text in which `tag` does not occur (it may end with a start of it)."""
    # ([^<] | "<" ([^t] | "t" ([^o] | … )?)?)*
    nested = ""
    for i in range(len(tag) - 1, 0, -1):
        inner = f"[^{_class_char(tag[i])}]"
        nested = f"({inner} | {literal(tag[i])} {nested})?" if nested else f"({inner})?"
    return f"([^{_class_char(tag[0])}] | {literal(tag[0])} {nested})*"


def _class_char(char: str) -> str:
    return "\\" + char if char in "]^-\\" else char
