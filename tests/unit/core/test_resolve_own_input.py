"""A Responses request that refers to nothing stored (no previous_response_id, no
item_reference) keeps the messages its parser made of its input; its items still get ids."""

from __future__ import annotations

from lmsp_desktop.core.api.responses.conversation import resolve
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.storage.store import Store

INPUT = [
    {"role": "developer", "content": "Use the tool."},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Weather in "},
            {"text": "Oslo?", "type": "text"},
        ],
    },
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"Oslo"}'},
    {
        "type": "function_call",
        "call_id": "c2",
        "name": "weather",
        "arguments": "{}",
        "id": "fc_own",
    },
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"role": "assistant", "content": "It is sunny.", "id": "msg_own"},
]


async def test_own_input_keeps_its_messages_and_items_get_ids(store: Store) -> None:
    request = parse_create({"model": "m", "input": INPUT}, "fail")
    await resolve(store.tasks, request, None)
    assert request["messages"] == [
        {"role": "developer", "content": "Use the tool."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"call_id": "c1", "name": "weather", "arguments": '{"city":"Oslo"}'},
                {"call_id": "c2", "name": "weather", "arguments": "{}"},
            ],
        },
        {"role": "tool", "call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
    ]
    ids = [item["id"] for item in request["input_items"]]
    assert [i.split("_")[0] for i in ids] == ["msg", "msg", "fc", "fc", "fco", "msg"]
    assert ids[3] == "fc_own" and ids[5] == "msg_own"
    assert len(set(ids)) == len(ids)
    assert [item["type"] for item in request["input_items"]] == [
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "message",
    ]


async def test_a_string_input_is_one_user_message_with_an_id(store: Store) -> None:
    request = parse_create({"model": "m", "input": "hi"}, "fail")
    await resolve(store.tasks, request, None)
    assert request["messages"] == [{"role": "user", "content": "hi"}]
    assert request["input_items"][0]["id"].startswith("msg_")
