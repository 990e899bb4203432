"""Conversation state kept in the store: `previous_response_id`, `item_reference` items,
`GET /v1/responses/{id}/input_items`, and `store: false` responses that are not kept."""

from __future__ import annotations

from typing import Any

import aiohttp

from tests.integration.service_fixtures import (
    Client,
    LiveCore,
    body,
    expect_error,
)

pytest_plugins = ["tests.integration.service_fixtures"]


async def create(http: aiohttp.ClientSession, client: Client, **fields: Any) -> dict[str, Any]:
    async with http.post("/v1/responses", json=body(**fields), headers=client.headers) as r:
        answer: dict[str, Any] = await r.json()
        assert r.status == 200, answer
    return answer


def task_request(live: LiveCore, task_id: str) -> dict[str, Any]:
    import json

    row = live.call(live.core.store.tasks.get(task_id))
    return json.loads(row["request"])  # type: ignore[no-any-return]


async def test_previous_response_id_puts_the_earlier_turns_first(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    first = await create(http, user, input="My name is Ada.", instructions="Be kind.")
    second = await create(http, user, input="What is my name?", previous_response_id=first["id"])
    assert second["previous_response_id"] == first["id"]
    third = await create(http, user, input="Thanks.", previous_response_id=second["id"])
    seen = task_request(live, third["id"])["messages"]
    # Earlier input and output first, then the new input; instructions are not carried over.
    assert seen == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": first["output_text"]},
        {"role": "user", "content": "What is my name?"},
        {"role": "assistant", "content": second["output_text"]},
        {"role": "user", "content": "Thanks."},
    ]


async def test_other_clients_and_unstored_responses_cannot_be_continued(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    other = live.client("responses:read", "responses:write")
    theirs = await create(http, other)
    async with http.post(
        "/v1/responses", json=body(previous_response_id=theirs["id"]), headers=user.headers
    ) as r:
        await expect_error(r, 404, param="previous_response_id")
    unstored = await create(http, user, store=False)
    assert unstored["store"] is False
    async with http.get(f"/v1/responses/{unstored['id']}", headers=user.headers) as r:
        await expect_error(r, 404, "response_not_found")
    async with http.get(f"/v1/responses/{unstored['id']}/input_items", headers=user.headers) as r:
        await expect_error(r, 404)
    async with http.post(
        "/v1/responses", json=body(previous_response_id=unstored["id"]), headers=user.headers
    ) as r:
        await expect_error(r, 404, param="previous_response_id")
    # Its task is still there for the app, marked as not stored.
    async with http.get(f"/v1/tasks/{unstored['id']}", headers=user.headers) as r:
        task = await r.json()
    assert task["stored"] is False and task["state"] in ("completed", "incomplete")
    async with http.get("/v1/tasks", headers=user.headers) as r:
        listed = {t["id"]: t["stored"] for t in (await r.json())["data"]}
    assert listed[unstored["id"]] is False


async def test_item_references_resolve_to_the_callers_stored_items(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    first = await create(http, user, input="My name is Ada.")
    output_id = first["output"][0]["id"]
    async with http.get(f"/v1/responses/{first['id']}/input_items", headers=user.headers) as r:
        input_id = (await r.json())["data"][0]["id"]
    second = await create(
        http,
        user,
        input=[
            {"type": "item_reference", "id": input_id},
            {"type": "item_reference", "id": output_id},
            {"role": "user", "content": "What is my name?"},
        ],
    )
    seen = task_request(live, second["id"])["messages"]
    assert seen == [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": first["output_text"]},
        {"role": "user", "content": "What is my name?"},
    ]
    other = live.client("responses:read", "responses:write")
    async with http.post(
        "/v1/responses",
        json=body(input=[{"type": "item_reference", "id": output_id}]),
        headers=other.headers,
    ) as r:
        await expect_error(r, 404, "item_not_found", "input[0].id")


async def test_input_items_are_listed_and_paged(http: aiohttp.ClientSession, user: Client) -> None:
    turns = [{"role": "user", "content": f"Number {i}."} for i in range(5)]
    response = await create(http, user, input=turns)
    url = f"/v1/responses/{response['id']}/input_items"
    async with http.get(url, params={"order": "asc"}, headers=user.headers) as r:
        listed = await r.json()
    assert listed["object"] == "list" and listed["has_more"] is False
    texts = [i["content"][0]["text"] for i in listed["data"]]
    assert texts == [t["content"] for t in turns]
    assert all(i["type"] == "message" and i["id"].startswith("msg_") for i in listed["data"])
    ids = [i["id"] for i in listed["data"]]
    # Newest first by default (as OpenAI); pages of 2 after the last id seen.
    seen: list[str] = []
    after = None
    while True:
        params = {"limit": 2, **({"after": after} if after else {})}
        async with http.get(url, params=params, headers=user.headers) as r:
            page = await r.json()
        seen += [i["id"] for i in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert seen == ids[::-1]
    async with http.get(url, params={"order": "sideways"}, headers=user.headers) as r:
        await expect_error(r, 400, param="order")
