"""Function-call events → Chat Completions `tool_calls` deltas."""

from __future__ import annotations

from lmsp_desktop.core.tools.chat_deltas import ToolCallDeltas


def added(item_id: str, call_id: str, name: str) -> dict[str, object]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name}
    return {"type": "response.output_item.added", "output_index": 0, "item": item}


def test_calls_open_with_their_name_then_stream_arguments() -> None:
    deltas = ToolCallDeltas()
    assert deltas.delta(added("fc_1", "call_1", "get_weather")) == {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ]
    }
    piece = {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"c'}
    assert deltas.delta(piece) == {"tool_calls": [{"index": 0, "function": {"arguments": '{"c'}}]}
    assert deltas.delta(added("fc_2", "call_2", "get_time"))["tool_calls"][0]["index"] == 1  # type: ignore[index]
    message = {"type": "response.output_item.added", "item": {"type": "message", "id": "m"}}
    assert deltas.delta(message) is None
    assert deltas.delta({"type": "response.output_text.delta", "delta": "hi"}) is None


def test_finish_reason_of_a_call_cut_short_is_length() -> None:
    from lmsp_desktop.core.api.chat.render import finish_reason

    call = {"type": "function_call", "status": "completed"}
    assert finish_reason({"output": [call], "task": {"state": "completed"}}) == "tool_calls"
    cut = {**call, "status": "incomplete"}
    assert finish_reason({"output": [cut], "task": {"state": "incomplete"}}) == "length"
    assert finish_reason({"output": [], "task": {"state": "completed"}}) == "stop"
