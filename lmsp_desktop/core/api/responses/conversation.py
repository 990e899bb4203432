"""Conversation state from the store: `previous_response_id` and `item_reference` input items
resolved before a task is created, so a chain survives restarts.

A response continues only from the caller's own stored responses: another client's id, a
`store: false` response and a chat completion all answer 404, as unknown ids do.
"""

from __future__ import annotations

import json
from typing import Any

from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.api.responses.request import items_to_messages
from lmsp_desktop.core.errors import LmspError, not_found
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.states import TERMINAL, TaskState
from lmsp_desktop.core.storage.tasks import TaskStore

ITEM_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def is_stored_response(request: dict[str, Any]) -> bool:
    """Only stored responses (not chat completions, not `store: false`) can be retrieved,
    continued, referenced or listed."""
    return request.get("api", "responses") == "responses" and bool(request.get("store", True))


async def stored_response(
    tasks: TaskStore, response_id: str, client_id: str | None, param: str | None = None
) -> Any:
    """The row of one of the caller's stored responses; 404 for anything else."""
    try:
        row = await tasks.get(response_id, client_id)
    except LmspError as exc:
        exc.param = param
        raise
    request = json.loads(row["request"])
    if request.get("api", "responses") != "responses":  # the caller's own: say what it is
        raise not_found(
            f"No response with id {response_id!r}: that id is the task of {task_of(row)}, "
            f"not a response; GET /v1/tasks/{response_id} shows it.",
            "response_not_found",
            param,
        )
    if not is_stored_response(request):
        raise not_found(
            f"No response with id {response_id!r}: it was made with `store: false`, so it is "
            f"not kept to be retrieved or continued; GET /v1/tasks/{response_id} shows its task.",
            "response_not_found",
            param,
        )
    return row


def task_of(row: Any) -> str:
    """What a task is, for the 404 that tells its own caller why a route of another API does
    not take its id: "a download", "a response", "an anthropic.messages request"."""
    kinds = {"download": "a download", "embedding": "an embedding"}
    if row["kind"] in kinds:
        return kinds[row["kind"]]
    api = str(json.loads(row["request"]).get("api") or "responses")
    if api == "responses":
        return "a response"
    return f"{'an' if api.startswith(tuple('aeiou')) else 'a'} {api} request"


async def resolve(tasks: TaskStore, request: dict[str, Any], client_id: str | None) -> None:
    """Fill `messages` (what the model sees) from the previous response, the resolved input
    items and the new input; give input items without an id their own id. `request` is
    parse_create's, whose `messages` are those of its own input items already."""
    if request.get("input_items") is None:
        return
    items = request["input_items"]
    previous_id = request.get("previous_response_id")
    referencing = False
    for item in items:
        if item["type"] == "item_reference":
            referencing = True
            break
    if referencing:
        items = [
            await _referenced(tasks, item["id"], client_id, f"input[{i}]")
            if item["type"] == "item_reference"
            else item
            for i, item in enumerate(items)
        ]
    request["input_items"] = [
        item if item.get("id") else {**item, "id": new_id(ITEM_PREFIX[item["type"]])}
        for item in items
    ]
    if not referencing and not previous_id:
        # Nothing from the store: the messages parse_create made of these same items stand
        # (ids do not change what the model sees), not made again (B1).
        return
    history: list[dict[str, Any]] = []
    if previous_id:
        history = await previous_messages(tasks, previous_id, client_id)
    request["messages"] = history + items_to_messages(request["input_items"])


async def previous_messages(
    tasks: TaskStore, previous_id: str, client_id: str | None
) -> list[dict[str, Any]]:
    """The earlier conversation: the previous response's messages (its own chain included),
    then its output."""
    row = await stored_response(tasks, previous_id, client_id, "previous_response_id")
    if TaskState(row["state"]) not in TERMINAL:
        raise LmspError(
            f"Response {previous_id} is still {row['state']}; continue from it once it has "
            "finished.",
            code="previous_response_not_finished",
            param="previous_response_id",
            status=409,
            type="conflict_error",
        )
    earlier = json.loads(row["request"]).get("messages") or []
    output = build_response(row)["output"]
    return [*earlier, *items_to_messages([_as_input(item) for item in output])]


def _as_input(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as it is fed back as input."""
    if item["type"] == "message":
        parts = [p for p in item["content"] if "text" in p]
        return {**item, "content": parts}
    return item


async def _referenced(
    tasks: TaskStore, item_id: str, client_id: str | None, where: str
) -> dict[str, Any]:
    """A stored item of the caller's own stored responses, input or output, by its id."""
    for row in await tasks.holding_item(item_id, client_id):
        request = json.loads(row["request"])
        if not is_stored_response(request):
            continue
        for item in build_response(row)["output"]:
            if item.get("id") == item_id:
                clean = _as_input(item)
                clean.pop("status", None)
                return clean
        for item in request.get("input_items") or []:
            if item.get("id") == item_id:
                return dict(item)
    raise not_found(
        f"No stored item with id {item_id!r} in your responses.", "item_not_found", f"{where}.id"
    )
