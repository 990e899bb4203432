"""Idempotency-Key on POST /v1/responses: replay, 422, 409, one task under concurrency."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiohttp
import pytest

from tests.integration.service_fixtures import (
    LONG,
    Client,
    LiveCore,
    body,
    expect_error,
    parse_sse,
    wait_state,
)

pytest_plugins = ["tests.integration.service_fixtures"]


def keyed(client: Client, key: str) -> dict[str, str]:
    return {**client.headers, "Idempotency-Key": key}


async def task_ids(http: aiohttp.ClientSession, client: Client) -> list[str]:
    async with http.get("/v1/tasks", params={"limit": 100}, headers=client.headers) as r:
        return [t["id"] for t in (await r.json())["data"]]


async def post(
    http: aiohttp.ClientSession, headers: dict[str, str], payload: dict[str, Any]
) -> tuple[int, dict[str, Any], str | None]:
    async with http.post("/v1/responses", json=payload, headers=headers) as r:
        return r.status, await r.json(), r.headers.get("Idempotent-Replayed")


async def test_background_replay_answers_the_stored_202_without_a_new_task(
    http: aiohttp.ClientSession, user: Client
) -> None:
    key = str(uuid.uuid4())
    status, first, replayed = await post(http, keyed(user, key), body(background=True))
    assert (status, replayed) == (202, None)
    # Same body with its keys in another order is the same request.
    again = dict(reversed(list(body(background=True).items())))
    status, second, replayed = await post(http, keyed(user, key), again)
    assert (status, replayed) == (202, "true")
    assert second == first
    assert await task_ids(http, user) == [first["id"]]


async def test_sync_replay_answers_the_final_response_as_200(
    http: aiohttp.ClientSession, user: Client
) -> None:
    key = "sync-" + uuid.uuid4().hex
    status, first, replayed = await post(http, keyed(user, key), body())
    assert status == 200 and replayed is None
    assert first["status"] in ("completed", "incomplete")
    status, second, replayed = await post(http, keyed(user, key), body())
    assert (status, replayed) == (200, "true")
    assert second["id"] == first["id"] and second["output_text"] == first["output_text"]
    assert second["status"] == first["status"]
    assert await task_ids(http, user) == [first["id"]]


async def test_stream_replay_answers_the_final_response_as_json(
    http: aiohttp.ClientSession, user: Client
) -> None:
    key = "stream-" + uuid.uuid4().hex
    async with http.post("/v1/responses", json=body(stream=True), headers=keyed(user, key)) as r:
        assert r.status == 200
        events = parse_sse(await r.read())
    final = events[-1].data["response"]
    status, replay, replayed = await post(http, keyed(user, key), body(stream=True))
    assert (status, replayed) == (200, "true")
    assert replay["id"] == final["id"] and replay["output_text"] == final["output_text"]


async def test_same_key_with_another_body_is_422(http: aiohttp.ClientSession, user: Client) -> None:
    key = uuid.uuid4().hex
    status, _, _ = await post(http, keyed(user, key), body(background=True))
    assert status == 202
    async with http.post(
        "/v1/responses",
        json=body(background=True, input="Something else."),
        headers=keyed(user, key),
    ) as r:
        await expect_error(r, 422, "idempotency_key_reused", "Idempotency-Key")
    assert len(await task_ids(http, user)) == 1


async def test_same_key_while_the_first_is_answered_is_409(
    http: aiohttp.ClientSession, user: Client
) -> None:
    key = uuid.uuid4().hex
    payload = body(**LONG)
    first = asyncio.create_task(post(http, keyed(user, key), payload))
    ids: list[str] = []
    while not ids:
        await asyncio.sleep(0.05)
        ids = await task_ids(http, user)
    await wait_state(http, user.headers, ids[0], ("running",))
    async with http.post("/v1/responses", json=payload, headers=keyed(user, key)) as r:
        await expect_error(r, 409, "idempotency_key_in_use")
    async with http.post(f"/v1/responses/{ids[0]}/cancel", headers=user.headers) as r:
        assert r.status == 200
    status, answer, _ = await first
    assert status == 200 and answer["status"] == "cancelled"
    # Now the key holds the final (cancelled) answer and replays it.
    status, replay, replayed = await post(http, keyed(user, key), payload)
    assert (status, replayed, replay["status"]) == (200, "true", "cancelled")
    assert await task_ids(http, user) == [ids[0]]


async def test_many_simultaneous_background_requests_with_one_key_make_one_task(
    http: aiohttp.ClientSession, user: Client
) -> None:
    key = uuid.uuid4().hex
    answers = await asyncio.gather(
        *(post(http, keyed(user, key), body(background=True)) for _ in range(12))
    )
    assert {status for status, _, _ in answers} == {202}
    assert len({answer["id"] for _, answer, _ in answers}) == 1
    assert sum(replayed is None for _, _, replayed in answers) == 1  # one original
    assert len(await task_ids(http, user)) == 1


async def test_many_simultaneous_sync_requests_with_one_key_make_one_task(
    http: aiohttp.ClientSession, user: Client
) -> None:
    key = uuid.uuid4().hex
    answers = await asyncio.gather(*(post(http, keyed(user, key), body()) for _ in range(8)))
    originals = [a for s, a, replayed in answers if s == 200 and replayed is None]
    assert len(originals) == 1
    for status, answer, _ in answers:
        if status == 409:
            assert answer["error"]["code"] == "idempotency_key_in_use"
        else:
            assert status == 200 and answer["id"] == originals[0]["id"]
    assert await task_ids(http, user) == [originals[0]["id"]]


async def test_keys_are_scoped_to_the_client(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    other = live.client("responses:read", "responses:write")
    key = uuid.uuid4().hex
    _, mine, _ = await post(http, keyed(user, key), body(background=True))
    status, theirs, replayed = await post(http, keyed(other, key), body(background=True))
    assert status == 202 and replayed is None and theirs["id"] != mine["id"]


@pytest.mark.parametrize("key", ["has space", "x" * 256, "tab\tkey"])
async def test_malformed_keys_are_400(http: aiohttp.ClientSession, user: Client, key: str) -> None:
    async with http.post("/v1/responses", json=body(), headers=keyed(user, key)) as r:
        await expect_error(r, 400, "invalid_idempotency_key", "Idempotency-Key")
    assert await task_ids(http, user) == []
