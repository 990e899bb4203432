"""A keyword the output grammar cannot enforce, left out of a non-strict schema, is named in
the task's `notes` (what GET /v1/tasks/{id} and each API's task show) on every API, not
only in the request's `schema_notes` (which only the app read)."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.api.anthropic.request import parse_messages_request
from lmsp_desktop.core.api.chat.request import parse_chat
from lmsp_desktop.core.api.ollama.request import parse_ollama_chat
from lmsp_desktop.core.api.responses.request import parse_create

STEPPED = {
    "type": "object",
    "properties": {"n": {"type": "number", "minimum": 0, "maximum": 10, "multipleOf": 0.5}},
}
ASK = [{"role": "user", "content": "Pick."}]
MODEL = "smollm2-135m-instruct"


def _responses() -> dict[str, Any]:
    tool = {"type": "function", "name": "pick", "parameters": STEPPED, "strict": False}
    return parse_create({"model": MODEL, "input": "Pick.", "tools": [tool]}, "fail")


def _responses_format() -> dict[str, Any]:
    text = {"format": {"type": "json_schema", "name": "pick", "schema": STEPPED, "strict": False}}
    return parse_create({"model": MODEL, "input": "Pick.", "text": text}, "fail")


def _chat() -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "pick", "parameters": STEPPED}}
    return parse_chat({"model": MODEL, "messages": ASK, "tools": [tool]}, "fail")


def _anthropic() -> dict[str, Any]:
    body = {
        "model": MODEL,
        "max_tokens": 10,
        "messages": ASK,
        "tools": [{"name": "pick", "input_schema": STEPPED}],
        "tool_choice": {"type": "any"},
    }
    return parse_messages_request(body, "fail")


def _ollama() -> dict[str, Any]:
    return parse_ollama_chat({"model": MODEL, "messages": ASK, "format": STEPPED}, "fail")


@pytest.mark.parametrize(
    ("parse", "place"),
    [
        (_responses, "tools[0].parameters.properties.n.multipleOf"),
        (_responses_format, "text.format.schema.properties.n.multipleOf"),
        (_chat, "tools[0].function.parameters.properties.n.multipleOf"),
        (_anthropic, "tools[0].input_schema.properties.n.multipleOf"),
        (_ollama, "format.properties.n.multipleOf"),
    ],
)
def test_the_dropped_keyword_is_in_the_task_notes(parse: Any, place: str) -> None:
    request = parse()
    assert request["schema_notes"] == [place]
    [note] = [n for n in request["notes"] if place in n]
    assert note.startswith("Not enforced by the output grammar")


def test_bounds_alone_leave_no_note() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 0}}}
    tool = {"type": "function", "function": {"name": "pick", "parameters": schema}}
    request = parse_chat({"model": MODEL, "messages": ASK, "tools": [tool]}, "fail")
    assert request["schema_notes"] == [] and request["notes"] == []
