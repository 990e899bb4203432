"""Validation of POST /v1/responses bodies: normalised settings, errors naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.api.task_request import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, chat_messages
from lmsp_desktop.core.errors import LmspError


def parse(**fields: Any) -> dict[str, Any]:
    return parse_create({"model": "m", "input": "Hi", **fields}, "fail")


def refused(body: Any) -> LmspError:
    with pytest.raises(LmspError) as caught:
        parse_create(body, "fail")
    assert caught.value.status == 400
    return caught.value


def test_a_string_input_is_one_user_message_and_defaults_are_reported() -> None:
    settings = parse()
    assert settings["messages"] == [{"role": "user", "content": "Hi"}]
    assert settings["temperature"] == DEFAULT_TEMPERATURE and settings["top_p"] == DEFAULT_TOP_P
    assert (settings["stream"], settings["background"], settings["store"]) == (False, False, True)
    assert settings["max_output_tokens"] is None and settings["seed"] is None
    assert settings["metadata"] == {} and settings["truncation"] == "disabled"
    assert settings["on_restart"] == "fail"


def test_explicit_settings_are_kept_and_unknown_fields_ignored() -> None:
    settings = parse(
        temperature=0,
        top_p=1,
        max_output_tokens=5,
        seed=42,
        stream=True,
        background=True,
        store=False,
        metadata={"k": "v"},
        on_restart="resume",
        user="ignored",
        frobnicate=1,
        presence_penalty=0.5,
    )
    assert settings["temperature"] == 0.0 and isinstance(settings["temperature"], float)
    assert (settings["top_p"], settings["max_output_tokens"], settings["seed"]) == (1.0, 5, 42)
    assert (settings["stream"], settings["background"], settings["store"]) == (True, True, False)
    assert settings["metadata"] == {"k": "v"} and settings["on_restart"] == "resume"
    assert settings["presence_penalty"] == 0.5
    assert settings["user"] == "ignored" and "frobnicate" not in settings


def test_the_service_default_restart_policy_applies() -> None:
    assert parse_create({"model": "m", "input": "x"}, "retry")["on_restart"] == "retry"


def test_open_responses_message_items_and_text_parts() -> None:
    settings = parse(
        input=[
            {"type": "message", "role": "system", "content": "Be brief."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Hello "},
                    {"type": "input_text", "text": "there"},
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hi!", "annotations": []}],
            },
            {"role": "developer", "content": "Use English."},
        ]
    )
    assert settings["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi!"},
        {"role": "developer", "content": "Use English."},
    ]


def test_instructions_come_first_as_a_system_message() -> None:
    settings = parse(instructions="Be kind.", input=[{"role": "user", "content": "Hi"}])
    assert chat_messages(settings) == [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Hi"},
    ]
    assert chat_messages(parse()) == [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": ""}, "model"),
        ({"input": 3}, "input"),
        ({"input": ["hi"]}, "input[0]"),
        (
            {"input": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]},
            "input[1].role",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": 1}]}]},
            "input[0].content[0].text",
        ),
        ({"input": [{"role": "user", "content": ["x"]}]}, "input[0].content[0]"),
        ({"temperature": True}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": float("nan")}, "top_p"),
        ({"frequency_penalty": 3}, "frequency_penalty"),
        ({"max_output_tokens": True}, "max_output_tokens"),
        ({"max_output_tokens": -1}, "max_output_tokens"),
        ({"seed": 2**70}, "seed"),
        ({"store": "no"}, "store"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        ({"metadata": []}, "metadata"),
        ({"on_restart": "never"}, "on_restart"),
        ({"instructions": 5}, "instructions"),
        ({"truncation": "auto!"}, "truncation"),
    ],
)
def test_bad_values_name_their_field(fields: dict[str, Any], param: str) -> None:
    error = refused({"model": "m", "input": "Hi", **fields})
    assert error.param == param
    assert error.body()["error"]["param"] == param


def test_missing_required_fields() -> None:
    assert refused({"input": "x"}).param == "model"
    assert refused({"model": "m"}).param == "input"
    error = refused(["not", "an", "object"])
    assert (error.code, error.param) == ("invalid_json", None)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
        ({"conversation": "conv_1"}, "conversation"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice"),
    ],
)
def test_unsupported_features_are_refused_not_ignored(fields: dict[str, Any], param: str) -> None:
    error = refused({"model": "m", "input": "Hi", **fields})
    assert error.code in ("unsupported_parameter", "invalid_value") and error.param == param


@pytest.mark.parametrize(
    "fields",
    [
        {"tools": []},
        {"text": {"format": {"type": "text"}}},
        {"text": {}},
        {"top_logprobs": 0},
        {"tool_choice": "auto"},
        {"tool_choice": "none"},
        {"reasoning": None},
        {"parallel_tool_calls": False},
    ],
)
def test_harmless_forms_of_those_features_are_accepted(fields: dict[str, Any]) -> None:
    parse(**fields)


def test_tool_turns_in_input_become_chat_messages() -> None:
    request = parse(
        input=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": '{"c":"P"}'},
            {"type": "function_call", "call_id": "c2", "name": "w", "arguments": '{"c":"R"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "rain"}],
            },
        ],
        tools=[{"type": "function", "name": "w"}],
    )
    assert request["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"call_id": "c1", "name": "w", "arguments": '{"c":"P"}'},
                {"call_id": "c2", "name": "w", "arguments": '{"c":"R"}'},
            ],
        },
        {"role": "tool", "call_id": "c1", "content": "sunny"},
        {"role": "tool", "call_id": "c2", "content": "rain"},
    ]
    assert request["tools"][0]["name"] == "w" and request["tool_choice"] == "auto"
