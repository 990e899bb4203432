"""Output items of responses that may call tools: the message and `function_call` items, and
the Open Responses events that open, stream and close them.

A response whose request offers tools keeps its items in `responses.output_items` (JSON, in
output order): `{"type": "message", "id"}` for the message, whose text stays in
`output_text` (the hot path appends to it), and the whole `function_call` item for each call.
Responses without tools leave the column NULL and keep their one message at output index 0.
These are the only builders of function-call events (TEAM.md: events come from the store).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lmsp_desktop.core.api.resource import message_item, output_text_part
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.json_text import from_json
from lmsp_desktop.core.tools.parser import (
    ArgumentsDelta,
    CallDone,
    CallStarted,
    Event,
    TextDelta,
)

ItemList = list[dict[str, Any]]


def load_items(raw: str | None) -> ItemList | None:
    return None if raw is None else list(from_json(raw))


def function_call_item(entry: Mapping[str, Any], status: str | None = None) -> dict[str, Any]:
    """The Open Responses `function_call` item (status from the entry unless given); a
    function offered in a `namespace` names it, as OpenAI's items do."""
    item = {
        "type": "function_call",
        "id": entry["id"],
        "call_id": entry["call_id"],
        "name": entry["name"],
        "arguments": entry["arguments"],
        "status": status or entry["status"],
    }
    if entry.get("namespace"):
        item["namespace"] = entry["namespace"]
    return item


def _message_opened(item_id: str, index: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**message_item(item_id, "", "in_progress"), "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": item_id,
            "output_index": index,
            "content_index": 0,
            "part": output_text_part(""),
        },
    ]


def _call_closed(entry: dict[str, Any], index: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "response.function_call_arguments.done",
            "item_id": entry["id"],
            "output_index": index,
            "name": entry["name"],
            "arguments": entry["arguments"],
        },
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": function_call_item(entry),
        },
    ]


@dataclass
class OutputChange:
    """What one batch of parser events does to a response: its events, the new item list,
    the text to append, and the message item's id (new when this batch opened it)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    items: ItemList = field(default_factory=list)
    text: str = ""
    message_id: str | None = None


def apply_events(
    items: ItemList, message_id: str | None, parsed: Sequence[Event], *, closing_status: str
) -> OutputChange:
    """The events and state changes for parser events `parsed` on a response with `items`.

    `closing_status` is the status of calls closed here (completed, or incomplete when a
    call was cut short by the end of the output)."""
    change = OutputChange(items=[dict(e) for e in items], message_id=message_id)
    out = change.events
    for event in parsed:
        if isinstance(event, TextDelta):
            index = next((i for i, e in enumerate(change.items) if e["type"] == "message"), None)
            if index is None:
                change.message_id = new_id("msg")
                index = len(change.items)
                change.items.append({"type": "message", "id": change.message_id})
                out.extend(_message_opened(change.message_id, index))
            out.append(
                {
                    "type": "response.output_text.delta",
                    "item_id": change.message_id,
                    "output_index": index,
                    "content_index": 0,
                    "delta": event.text,
                }
            )
            change.text += event.text
        elif isinstance(event, CallStarted):
            entry = {
                "type": "function_call",
                "id": new_id("fc"),
                "call_id": new_id("call"),
                "name": event.name,
                "arguments": "",
                "status": "in_progress",
            }
            if event.namespace:
                entry["namespace"] = event.namespace
            change.items.append(entry)
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": len(change.items) - 1,
                    "item": function_call_item(entry),
                }
            )
        else:
            index, entry = _call(change.items, event.index)
            if isinstance(event, ArgumentsDelta):
                entry["arguments"] += event.delta
                out.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": entry["id"],
                        "output_index": index,
                        "delta": event.delta,
                    }
                )
            elif isinstance(event, CallDone):
                entry["arguments"] = event.arguments
                entry["status"] = closing_status
                out.extend(_call_closed(entry, index))
    return change


def _call(items: ItemList, call_index: int) -> tuple[int, dict[str, Any]]:
    """The output index and entry of the `call_index`-th function call."""
    calls = [(i, e) for i, e in enumerate(items) if e["type"] == "function_call"]
    return calls[call_index]


def close_events(items: ItemList, text: str, state_completed: bool) -> list[dict[str, Any]]:
    """The done events of the items still open when a response ends (its message; a call
    whose block never closed is incomplete)."""
    events: list[dict[str, Any]] = []
    status = "completed" if state_completed else "incomplete"
    for index, entry in enumerate(items):
        if entry["type"] == "message":
            item_id = entry["id"]
            events += [
                {
                    "type": "response.output_text.done",
                    "item_id": item_id,
                    "output_index": index,
                    "content_index": 0,
                    "text": text,
                },
                {
                    "type": "response.content_part.done",
                    "item_id": item_id,
                    "output_index": index,
                    "content_index": 0,
                    "part": output_text_part(text),
                },
                {
                    "type": "response.output_item.done",
                    "output_index": index,
                    "item": message_item(item_id, text, status),
                },
            ]
        elif entry["status"] == "in_progress":
            entry["status"] = "incomplete"
            events += _call_closed(entry, index)
    return events
