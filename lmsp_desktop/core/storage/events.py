"""The builders of the events in a task's log: the one place their payloads are made.

Pure functions of a task's joined row (no SQL): transitions, recovery and the hot path of
text deltas take their events from here, so an event looks the same whoever writes it.
Function-call items have their own builders in output_items.py.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any, cast, overload

import orjson

from lmsp_desktop.core.api.resource import build_response, message_item, output_text_part
from lmsp_desktop.core.json_text import from_json
from lmsp_desktop.core.states import EventType, TaskState
from lmsp_desktop.core.storage.output_items import close_events, load_items

Row = sqlite3.Row
# A transition's events for one task, from its row after the change.
EventFactory = Callable[[Row], list[dict[str, Any]]]
DELTA = str(EventType.OUTPUT_TEXT_DELTA)
_quoted: Callable[[str], str] = encode_basestring_ascii  # json.dumps(str), the C part


def numbered(task_id: str, seq: int, event: dict[str, Any], now: float) -> tuple[Any, ...]:
    """The `task_events` row of an event numbered `seq`; a response it carries says so as
    its last sequence number."""
    event["sequence_number"] = seq
    task = event.get("response", {}).get("task")
    if task is not None:
        task["last_sequence_number"] = seq
    return (task_id, seq, str(event["type"]), now, to_json(event))


def to_json(value: Any) -> str:
    """The JSON text of an event (or a snapshot) as stored: orjson's, compact and in a tenth
    of json.dumps' time for a ~1.2 KB response (recovery writes 10k of them, B4); json's
    for what orjson refuses (an integer past 64 bits, say in a tool's schema)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


def created_event_row(task_id: str, response_json: str, now: float) -> tuple[Any, ...]:
    """The `task_events` row of a new task's `response.created` (number 1), put together from
    the response's JSON text (which the 202 answer reuses): the text `numbered` would give."""
    data = f'{{"type": "{EventType.CREATED}", "response": {response_json}, "sequence_number": 1}}'
    return (task_id, 1, str(EventType.CREATED), now, data)


def numbered_deltas(
    task_id: str, item_id: str | None, deltas: Sequence[str], first: int, now: float
) -> list[tuple[Any, ...]]:
    """The rows of text deltas numbered from `first`. The hot path (every token): each
    event's JSON is put together from a shared prefix instead of serialising a dict, each
    text quoted by json's own C quoting (what json.dumps of a str calls, at a sixth of its
    cost)."""
    prefix = (
        f'{{"type":"{DELTA}","item_id":'
        f'{json.dumps(item_id)},"output_index":0,"content_index":0,"delta":'
    )
    return [
        (task_id, seq, DELTA, now, f'{prefix}{_quoted(d)},"sequence_number":{seq}}}')
        for seq, d in enumerate(deltas, first)
    ]


class DeltaEvents(Sequence[dict[str, Any]]):
    """The text delta events numbered from `first`, as dicts: what json.loads of the rows of
    `numbered_deltas` gives (followers get them with the commit instead of reading back).
    Made on first reading: a task nobody follows (a background task, B2) never pays for
    them."""

    __slots__ = ("_deltas", "_events", "_first", "_item_id")

    def __init__(self, item_id: str | None, deltas: Sequence[str], first: int) -> None:
        self._item_id = item_id
        self._deltas = deltas
        self._first = first
        self._events: tuple[dict[str, Any], ...] | None = None

    def _made(self) -> tuple[dict[str, Any], ...]:
        if self._events is None:
            item_id = self._item_id
            self._events = tuple(
                {
                    "type": DELTA,
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": d,
                    "sequence_number": seq,
                }
                for seq, d in enumerate(self._deltas, self._first)
            )
        return self._events

    def __len__(self) -> int:
        return len(self._deltas)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._made())

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[dict[str, Any], ...]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | tuple[dict[str, Any], ...]:
        return self._made()[index]


def response_of(row: Row, queue_position: int | None = None) -> dict[str, Any]:
    """`build_response` for a joined row (sqlite3.Row reads like a mapping)."""
    return build_response(cast("Mapping[str, Any]", row), queue_position, from_json(row["request"]))


def with_response(event_type: str, response: dict[str, Any]) -> dict[str, Any]:
    return {"type": str(event_type), "response": response}


def carrying_response(event_type: str) -> EventFactory:
    """Events of a transition that announce the whole response (LMSP's own events do too,
    so a client can rebuild state from any of them)."""
    return lambda row: [with_response(event_type, response_of(row))]


def closing_with(event_type: str) -> EventFactory:
    """The done events of the items still open, then `event_type` with the response: how a
    task ends (completed, incomplete, failed, cancelled)."""
    return lambda row: [*close_item_events(row), with_response(event_type, response_of(row))]


def in_progress(row: Row) -> dict[str, Any]:
    """`response.in_progress`: items are announced by the events after it, so until then
    the output is empty."""
    return with_response(
        EventType.IN_PROGRESS, {**response_of(row), "output": [], "output_text": ""}
    )


def message_opened(item_id: str) -> list[dict[str, Any]]:
    """The events that open the output message at index 0 (responses without tools)."""
    return [
        {
            # Announced empty: its part arrives with response.content_part.added (an SDK
            # building the item from events would otherwise hold two parts).
            "type": EventType.OUTPUT_ITEM_ADDED,
            "output_index": 0,
            "item": {**message_item(item_id, "", "in_progress"), "content": []},
        },
        {
            "type": EventType.CONTENT_PART_ADDED,
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "part": output_text_part(""),
        },
    ]


def close_item_events(row: Row) -> list[dict[str, Any]]:
    """The done events of an open output item: text, part, item (Open Responses order)."""
    items = load_items(row["output_items"])
    if items is not None:  # a response that may call tools: its own item list
        return close_events(items, row["output_text"], row["state"] == TaskState.COMPLETED)
    item_id = row["item_id"]
    if not item_id:
        return []
    text = row["output_text"]
    status = "completed" if row["state"] == TaskState.COMPLETED else "incomplete"
    return [
        {
            "type": EventType.OUTPUT_TEXT_DONE,
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {
            "type": EventType.CONTENT_PART_DONE,
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "part": output_text_part(text),
        },
        {
            "type": EventType.OUTPUT_ITEM_DONE,
            "output_index": 0,
            "item": message_item(item_id, text, status),
        },
    ]
