"""What the runner hands the engine for a request's tools and output format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lmsp_desktop.core.tools.grammars import offered_tools, output_grammar
from lmsp_desktop.core.tools.prompt import output_notes, with_system_text


@dataclass(frozen=True)
class OutputPlan:
    """The messages with the output notes, the tools to offer (the engine renders them via
    the chat template or the generic prompt), the output grammar, and whether the output
    must be parsed for tool calls."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    grammar: str | None
    parse_calls: bool


def plan_output(request: dict[str, Any], messages: list[dict[str, Any]]) -> OutputPlan:
    """The plan for a normalised request (its `tools`, `tool_choice`, `text_format`, …) and
    the chat messages built from it."""
    tools = offered_tools(request)
    return OutputPlan(
        messages=with_system_text(messages, output_notes(request)),
        tools=tools or None,
        grammar=output_grammar(request),
        parse_calls=bool(tools),
    )
