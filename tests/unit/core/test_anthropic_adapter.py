"""The Anthropic adapter's parser (Messages bodies into the task request) and its stream
renderer (task events into Anthropic's events), on bodies as the SDK and Claude Code send."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lmsp_desktop.core.api.anthropic.render import MessageStream, anthropic_error
from lmsp_desktop.core.api.anthropic.request import parse_messages_request
from lmsp_desktop.core.errors import LmspError

WEATHER = {
    "name": "get_weather",
    "description": "Weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def parse(**fields: Any) -> dict[str, Any]:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    return parse_messages_request({**body, **fields}, "fail")


def test_system_blocks_and_a_tool_round_trip_become_shared_messages() -> None:
    request = parse(
        system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "...", "signature": "s"},
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "Sunny"}],
                    },
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
        tools=[WEATHER],
    )
    assert request["messages"] == [
        {"role": "system", "content": "Be brief.\nBe kind."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"call_id": "toolu_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
            ],
        },
        {"role": "tool", "call_id": "toolu_1", "content": "Sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert request["api"] == "anthropic.messages" and request["max_output_tokens"] == 8
    assert request["tools"][0]["parameters"] == WEATHER["input_schema"]
    assert request["tools"][0]["strict"] is False


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "any"}, "required"),
        ({"type": "tool", "name": "get_weather"}, {"type": "function", "name": "get_weather"}),
    ],
)
def test_tool_choice_maps_onto_the_shared_plan(choice: Any, expected: Any) -> None:
    assert parse(tools=[WEATHER], tool_choice=choice)["tool_choice"] == expected


def test_server_tools_are_dropped_and_unused_fields_noted() -> None:
    request = parse(
        tools=[WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
        thinking={"type": "enabled", "budget_tokens": 2000},
        container="c1",
        stop_sequences=["END"],
        temperature=0.2,
        metadata={"user_id": "u1"},
    )
    assert [t["name"] for t in request["tools"]] == ["get_weather"]
    assert request["dropped_tools"] == ["web_search_20250305:web_search"]
    assert request["stop"] == ["END"] and request["temperature"] == 0.2
    assert request["user"] == "u1"
    assert any("`container`" in n for n in request["notes"])
    assert any("thinking" in n.lower() for n in request["notes"])


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"tool_choice": {"type": "tool", "name": "nope"}, "tools": [WEATHER]}, "tool_choice"),
    ],
)
def test_bad_fields_are_refused_naming_them(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(LmspError) as refused:
        parse(**fields)
    assert refused.value.status == 400 and refused.value.param == param
    assert anthropic_error(refused.value)["error"]["type"] == "invalid_request_error"


def events_of(data: bytes) -> list[dict[str, Any]]:
    """The stream's events, each checked to carry its SSE name as its `type`."""
    events = []
    for block in data.decode().strip().split("\n\n"):
        name, payload = block.split("\n")
        event = json.loads(payload.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    return events


def test_the_stream_opens_a_block_per_text_and_call_and_ends_with_the_reason() -> None:
    stream = MessageStream({"id": "msg_1", "model": "m"}, {})
    call = {"type": "function_call", "id": "fc_1", "call_id": "toolu_1", "name": "get_weather"}
    done = {
        "task": {"state": "completed"},
        "output": [call],
        "usage": {
            "input_tokens": 30,
            "output_tokens": 9,
            "input_tokens_details": {"cached_tokens": 20},
        },
    }
    data = stream.opening() + b"".join(
        stream.render(e)
        for e in [
            {"type": "response.output_item.added", "item": {"type": "message", "id": "msg"}},
            {"type": "response.output_text.delta", "delta": 'Say "hi"'},
            {"type": "response.output_text.delta", "delta": "!"},
            {"type": "response.output_item.added", "item": call},
            {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"ci'},
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "delta": 'ty":"P"}',
            },
            {"type": "response.output_item.done", "item": call},
            {"type": "response.completed", "response": done},
        ]
    )
    events = events_of(data)
    assert [e["type"] for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[3]["delta"] == {"type": "text_delta", "text": 'Say "hi"'}
    assert events[6]["index"] == 1 and events[6]["content_block"]["type"] == "tool_use"
    partial = "".join(e["delta"]["partial_json"] for e in events[7:9])
    assert json.loads(partial) == {"city": "P"}
    assert events[10]["delta"]["stop_reason"] == "tool_use"
    assert events[10]["usage"]["input_tokens"] == 10
    assert events[10]["usage"]["cache_read_input_tokens"] == 20
    assert stream.finished


def test_a_failed_task_ends_the_stream_with_an_error_event() -> None:
    stream = MessageStream({"id": "msg_1", "model": "m"}, {})
    failed = {"error": {"code": "engine_crashed", "message": "The engine crashed."}}
    events = events_of(stream.render({"type": "response.failed", "response": failed}))
    assert events == [
        {"type": "error", "error": {"type": "api_error", "message": "The engine crashed."}}
    ]
    assert stream.finished


def test_a_system_turn_among_the_messages_is_kept_in_place() -> None:
    """Claude Code (2.1) sends its environment as a system turn after the first user turn."""
    request = parse(
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "say hi"}]},
            {"role": "system", "content": "Working directory: /tmp"},
        ]
    )
    assert request["messages"] == [
        {"role": "user", "content": "say hi"},
        {"role": "system", "content": "Working directory: /tmp"},
    ]
