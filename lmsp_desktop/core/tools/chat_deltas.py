"""Chat Completions `tool_calls` deltas from a task's function-call events.

The first chunk of a call carries its index, id, type and name with empty arguments; the
following ones carry pieces of the arguments, as OpenAI streams them.
"""

from __future__ import annotations

from typing import Any


class ToolCallDeltas:
    """Follows one task's events; `delta` gives the chunk delta an event becomes, if any."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}  # function_call item id → its index among the calls

    def delta(self, event: dict[str, Any]) -> dict[str, Any] | None:
        kind = event["type"]
        if kind == "response.output_item.added" and event["item"]["type"] == "function_call":
            item = event["item"]
            index = self._index.setdefault(item["id"], len(self._index))
            call = {
                "index": index,
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": ""},
            }
            return {"tool_calls": [call]}
        if kind == "response.function_call_arguments.delta" and event["item_id"] in self._index:
            call = {
                "index": self._index[event["item_id"]],
                "function": {"arguments": event["delta"]},
            }
            return {"tool_calls": [call]}
        return None
