"""Tools and output-format fields of both APIs → the normalised request keys."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.tools.fields import parse_tool_fields

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def error(body: dict[str, Any], api: str = "responses") -> LmspError:
    with pytest.raises(LmspError) as info:
        parse_tool_fields(body, api)
    assert info.value.status == 400
    return info.value


def test_no_tools_gives_the_defaults() -> None:
    assert parse_tool_fields({}, "responses") == {
        "tools": [],
        "tool_choice": "auto",
        "allowed_tools": None,
        "parallel_tool_calls": False,
        "max_tool_calls": None,
        "dropped_tools": [],
        "text_format": {"type": "text"},
        "schema_notes": [],
    }


def test_codex_like_tools_keep_functions_and_note_the_rest() -> None:
    body = {
        "tools": [
            {"type": "web_search"},
            {
                "type": "function",
                "name": "shell",
                "parameters": {"type": "object"},
                "strict": False,
            },
            {"type": "namespace", "name": "mcp", "tools": [{**WEATHER, "strict": False}]},
            {"type": "mcp", "server_label": "github", "server_url": "https://x"},
            {"type": "custom", "name": "apply_patch"},
            {"type": "file_search"},
            {"type": "computer_use_preview"},
        ],
    }
    fields = parse_tool_fields(body, "responses")
    assert [t["name"] for t in fields["tools"]] == ["shell", "get_weather"]
    assert fields["tools"][1]["namespace"] == "mcp" and "namespace" not in fields["tools"][0]
    assert fields["dropped_tools"] == [
        "web_search",
        "mcp:github",
        "custom:apply_patch",
        "file_search",
        "computer_use_preview",
    ]


def test_strict_defaults_differ_between_the_apis() -> None:
    responses = parse_tool_fields({"tools": [WEATHER]}, "responses")
    chat_tool = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
    chat = parse_tool_fields({"tools": [chat_tool]}, "chat.completions")
    assert responses["tools"][0]["strict"] is True
    assert chat["tools"][0]["strict"] is False
    assert chat["tools"][0]["parameters"] == WEATHER["parameters"]


def test_tool_choice_forms() -> None:
    tools = {"tools": [WEATHER]}
    named = parse_tool_fields(
        {**tools, "tool_choice": {"type": "function", "name": "get_weather"}}, "responses"
    )
    assert named["tool_choice"] == {"type": "function", "name": "get_weather"}
    chat_named = parse_tool_fields(
        {
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
        "chat.completions",
    )
    assert chat_named["tool_choice"] == {"type": "function", "name": "get_weather"}
    allowed = parse_tool_fields(
        {
            **tools,
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "get_weather"}],
            },
        },
        "responses",
    )
    assert (allowed["tool_choice"], allowed["allowed_tools"]) == ("required", ["get_weather"])
    assert (
        error({**tools, "tool_choice": {"type": "function", "name": "nope"}}).param == "tool_choice"
    )
    assert error({"tool_choice": "required"}).param == "tools"
    assert error({**tools, "tool_choice": {"type": "web_search"}}).code == "unsupported_parameter"


def test_strict_tool_with_an_unenforceable_keyword_is_refused_by_name() -> None:
    tool = {
        **WEATHER,
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1, "multipleOf": 2}},
        },
    }
    assert error({"tools": [tool]}).param == "tools[0].parameters.properties.n.multipleOf"
    loose = parse_tool_fields({"tools": [{**tool, "strict": False}]}, "responses")
    assert loose["tools"][0]["strict"] is False  # accepted; the keyword is left out and noted
    assert loose["schema_notes"] == ["tools[0].parameters.properties.n.multipleOf"]
    chat = parse_tool_fields(
        {"tools": [{"type": "function", "function": tool}]}, "chat.completions"
    )
    assert chat["schema_notes"] == ["tools[0].function.parameters.properties.n.multipleOf"]


def test_zod_int_bounds_pass_strict_on_both_apis() -> None:
    zod_int = {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991}
    parameters = {"type": "object", "properties": {"n": zod_int}, "required": ["n"]}
    tool = {**WEATHER, "parameters": parameters, "strict": True}
    responses = parse_tool_fields({"tools": [tool]}, "responses")
    chat = parse_tool_fields(
        {"tools": [{"type": "function", "function": tool}]}, "chat.completions"
    )
    assert responses["tools"][0]["parameters"] == chat["tools"][0]["parameters"] == parameters
    assert responses["schema_notes"] == chat["schema_notes"] == []


def test_output_formats() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    responses = parse_tool_fields(
        {
            "text": {
                "format": {"type": "json_schema", "name": "A", "schema": schema, "strict": True}
            }
        },
        "responses",
    )
    assert responses["text_format"] == {
        "type": "json_schema",
        "name": "A",
        "description": None,
        "schema": schema,
        "strict": True,
    }
    chat = parse_tool_fields(
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "A", "schema": schema},
            }
        },
        "chat.completions",
    )
    assert chat["text_format"]["schema"] == schema and chat["text_format"]["strict"] is False
    assert parse_tool_fields({"response_format": {"type": "json_object"}}, "chat.completions")[
        "text_format"
    ] == {"type": "json_object"}
    # llama-server's extension (instructor's JSON_SCHEMA mode): json_object with a schema is
    # a non-strict json_schema; a schema that is no object is named where it was sent.
    with_schema = {"response_format": {"type": "json_object", "schema": schema}}
    fmt = parse_tool_fields(with_schema, "chat.completions")["text_format"]
    assert fmt["type"] == "json_schema" and fmt["schema"] == schema and fmt["strict"] is False
    not_one = {"response_format": {"type": "json_object", "schema": "x"}}
    with pytest.raises(LmspError) as raised:
        parse_tool_fields(not_one, "chat.completions")
    assert raised.value.param == "response_format.schema"
    bad = {"type": "json_schema", "name": "A", "schema": {"type": "string", "format": "email"}}
    assert error({"text": {"format": {**bad, "strict": True}}}).param == "text.format.schema.format"
    loose = parse_tool_fields({"text": {"format": bad}}, "responses")
    assert loose["schema_notes"] == ["text.format.schema.format"]
    assert error({"text": {"format": {"type": "xml"}}}).param == "text.format.type"


def test_chat_refuses_retired_functions_and_hosted_tools() -> None:
    assert error({"functions": [{"name": "f"}]}, "chat.completions").param == "functions"
    assert error({"tools": [{"type": "web_search"}]}, "chat.completions").param == "tools[0].type"


def test_bad_values_name_their_field() -> None:
    assert error({"tools": [{"type": "function", "name": "bad name"}]}).param == "tools[0].name"
    assert error({"tools": [WEATHER, WEATHER]}).param == "tools"
    assert error({"parallel_tool_calls": "yes"}).param == "parallel_tool_calls"
    assert error({"max_tool_calls": -1}).param == "max_tool_calls"
