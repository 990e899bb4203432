"""The output grammar of a request: tool calls whose arguments follow each tool's schema,
and structured output (`json_object`, `json_schema`).

- `required` or a named function: the output is one call block (several when parallel calls
  are allowed, at most `max_tool_calls`), nothing else.
- `auto`: free text in which the tool-call opening cannot occur without its call, or call
  blocks; the grammar takes hold at the opening (llama-server's lazy grammar, written as one
  grammar: see docs/clients-tools.md for why not llama.cpp's lazy sampler). With a JSON
  output format: either the JSON answer or call blocks.
- No tools offered: the JSON output format's grammar, or none for plain text.
Arguments follow the tool's JSON Schema whether or not the tool is strict; for a non-strict
tool the keywords the grammar cannot enforce are left out (schema.enforceable).
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
    json_format = fmt.get("type") in ("json_object", "json_schema")
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
        _text_without(builder, OPEN)
        builder.rule("root", f"{answer} | {calls}" if answer else f"free-text ({calls})?")
    return builder.text()


def _answer_rule(builder: GrammarBuilder, fmt: dict[str, Any]) -> str:
    if fmt.get("type") == "json_schema":
        return builder.schema(
            fmt["schema"], "answer-", "text.format.schema", strict=bool(fmt.get("strict"))
        )
    return builder.any_json_object("answer-")


def _calls_rule(builder: GrammarBuilder, tools: list[dict[str, Any]], limit: int | None) -> str:
    alternatives = []
    for i, tool in enumerate(tools):
        prefix = f"t{i}-"
        arguments = builder.schema(
            tool["parameters"], prefix, f"tools[{i}].parameters", strict=bool(tool.get("strict"))
        )
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


def _text_without(builder: GrammarBuilder, tag: str) -> str:
    """A rule for any text in which `tag` does not occur (it may end with a start of it).

    The tag's first character occurs only at its start, so after that character the text
    either breaks off the tag (a character that is neither the tag's next one nor a new
    start), starts the tag again, or ends. With tag = a b c:
      free ::= ([^a] | "a" again* leave)* ("a" again* part)?
      part ::= ("b")?            (a proper prefix of "bc")
      again ::= part "a"          (a new start)
      leave ::= [^ba] | "b" [^ca]
    """
    head, rest = tag[0], tag[1:]
    assert head not in rest, "the tag's first character must not occur again in it"
    first = _class_char(head)
    part = ""
    for char in reversed(rest[:-1]):
        part = f"({literal(char)} {part})?" if part else f"({literal(char)})?"
    leave = ""
    for char in reversed(rest):
        other = f"[^{_class_char(char)}{first}]"
        leave = f"{other} | {literal(char)} ({leave})" if leave else other
    builder.rule("free-part", part or '""')
    builder.rule("free-again", f"free-part {literal(head)}")
    builder.rule("free-leave", leave)
    return builder.rule(
        "free-text",
        f"([^{first}] | {literal(head)} free-again* free-leave)* "
        f"({literal(head)} free-again* free-part)?",
    )


def _class_char(char: str) -> str:
    return "\\" + char if char in "]^-\\" else char
