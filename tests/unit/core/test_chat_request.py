"""The Chat Completions normaliser: the shared request dict, and 400s naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.api.chat.request import parse_chat
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.errors import LmspError

HELLO = [{"role": "user", "content": "Hi"}]


def parse(**fields: Any) -> dict[str, Any]:
    return parse_chat({"model": "m", "messages": HELLO, **fields}, "fail")


def refused(**fields: Any) -> LmspError:
    with pytest.raises(LmspError) as caught:
        parse(**fields)
    assert caught.value.status == 400
    return caught.value


def test_the_same_keys_as_a_responses_request() -> None:
    chat = parse()
    responses = parse_create({"model": "m", "input": "Hi"}, "fail")
    assert set(responses) <= set(chat)
    assert chat["api"] == "chat.completions" and responses["api"] == "responses"
    assert chat["messages"] == responses["messages"] == [{"role": "user", "content": "Hi"}]
    assert (chat["temperature"], chat["top_p"]) == (responses["temperature"], responses["top_p"])


def test_fields_map_to_the_shared_names() -> None:
    settings = parse(
        max_tokens=50,
        temperature=0,
        seed=3,
        stop="END",
        user="u1",
        metadata={"a": "b"},
        on_restart="resume",
        stream=True,
        stream_options={"include_usage": True},
        store=False,
        reasoning_effort="low",
    )
    assert settings["max_output_tokens"] == 50 and settings["stop"] == ["END"]
    assert (settings["user"], settings["metadata"], settings["on_restart"]) == (
        "u1",
        {"a": "b"},
        "resume",
    )
    assert settings["stream_options"] == {"include_usage": True} and settings["store"] is False
    assert settings["reasoning"] == {"effort": "low"}
    assert parse(max_tokens=50, max_completion_tokens=7)["max_output_tokens"] == 7


def test_tool_turns_take_the_shared_shape() -> None:
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    assert parse(messages=messages)["messages"] == [
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"call_id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'}
            ],
        },
        {"role": "tool", "call_id": "call_1", "content": "sunny"},
    ]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 3}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "x"}}, "audio"),
        ({"tools": [{"type": "function"}]}, "tools[0].function"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"tool_choice": "required"}, "tools"),  # required, but no tools sent
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stop": 5}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": "Hi"}, "messages"),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "assistant"}]}, "messages[0].content"),
        ({"messages": [{"role": "assistant", "tool_calls": [{}]}]}, "messages[0].tool_calls[0]"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"model": ""}, "model"),
    ],
)
def test_what_cannot_be_honoured_names_the_field(fields: dict[str, Any], param: str) -> None:
    assert refused(**fields).param == param


@pytest.mark.parametrize(
    "fields",
    [
        {"n": 1},
        {"logprobs": False},
        {"modalities": ["text"]},
        {"response_format": {"type": "text"}},
        {"tool_choice": "none"},
        {"tools": []},
        {"parallel_tool_calls": True},
        {"service_tier": "auto"},
        {"frobnicate": 1},
    ],
)
def test_harmless_forms_are_accepted(fields: dict[str, Any]) -> None:
    parse(**fields)
