"""SSE on the Responses routes (Open Responses types only) and on the task events routes
(every event, replay then follow, Last-Event-ID resume), against the real demo model."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.integration.service_fixtures import (
    LONG,
    MODEL,
    Client,
    LiveCore,
    SseEvent,
    body,
    cancel,
    create_background,
    events_of,
    expect_error,
    occupy_model,
    parse_sse,
    read_sse_until,
    wait_state,
)

pytest_plugins = ["tests.integration.service_fixtures"]

OPEN_RESPONSES_TYPES = {
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
}
LMSP_TYPES = {
    "response.loading",
    "response.cancelling",
    "response.cancelled",
    "response.resumed",
}
SSE = {"Accept": "text/event-stream"}


def is_final(event: SseEvent) -> bool:
    return event.event in ("response.completed", "response.incomplete", "response.failed", "error")


def public_view(log: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """What a Responses stream must show of a log: Open Responses types with the log's own
    numbers, and `response.cancelled` as the standard `error` event."""
    shown = []
    for event in log:
        if event["type"] == "response.cancelled":
            shown.append((event["sequence_number"], "error"))
        elif event["type"] not in LMSP_TYPES:
            shown.append((event["sequence_number"], event["type"]))
    return shown


async def test_post_stream_carries_open_responses_events_with_log_numbers(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post("/v1/responses", json=body(stream=True), headers=user.headers) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = parse_sse(await r.read())
    types = [e.event for e in events]
    assert set(types) <= OPEN_RESPONSES_TYPES
    assert types[0] == "response.created" and types[-1] in (
        "response.completed",
        "response.incomplete",
    )
    task_id = events[0].data["response"]["id"]
    log = await events_of(http, user.headers, task_id)
    assert [(int(e.id), e.event) for e in events] == public_view(log)
    assert [e.data for e in events] == [e for e in log if e["type"] not in LMSP_TYPES]
    text = "".join(e.data["delta"] for e in events if e.event == "response.output_text.delta")
    assert text == events[-1].data["response"]["output_text"]


async def test_a_cancelled_stream_ends_with_the_error_event_cancelled(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post(
        "/v1/responses", json=body(stream=True, **LONG), headers=user.headers
    ) as r:
        head = await read_sse_until(r, lambda e: e.event == "response.output_text.delta")
        task_id = head[0].data["response"]["id"]
        await cancel(http, user.headers, task_id)
        rest = parse_sse(await r.read())  # the server ends the stream after `error`
    events = head + rest
    assert events[-1].event == "error"
    assert events[-1].data["error"]["code"] == "cancelled"
    assert {"type", "code", "message", "param"} <= set(events[-1].data["error"])
    assert not {e.event for e in events} & LMSP_TYPES
    log = await events_of(http, user.headers, task_id)
    assert "response.cancelling" in [e["type"] for e in log]
    assert [(int(e.id), e.event) for e in events] == public_view(log)
    # The numbers skip where LMSP's own events were left out.
    numbers = [int(e.id) for e in events]
    assert numbers != list(range(1, len(numbers) + 1))
    task = await wait_state(http, user.headers, task_id, ("cancelled",))
    assert task["output_tokens"] >= 1  # partial output kept


async def test_a_stream_whose_client_goes_away_cancels_its_task(
    http: aiohttp.ClientSession, user: Client
) -> None:
    r = await http.post("/v1/responses", json=body(stream=True, **LONG), headers=user.headers)
    head = await read_sse_until(r, lambda e: e.event == "response.output_text.delta")
    task_id = head[0].data["response"]["id"]
    r.close()  # drop the connection mid-stream
    task = await wait_state(http, user.headers, task_id, ("cancelled",), within=30)
    assert task["output_tokens"] >= 1


async def test_a_background_stream_survives_its_client(
    http: aiohttp.ClientSession, user: Client
) -> None:
    r = await http.post(
        "/v1/responses",
        json=body(stream=True, background=True, max_output_tokens=16),
        headers=user.headers,
    )
    assert r.status == 200
    head = await read_sse_until(r, lambda e: e.event == "response.created")
    r.close()
    task_id = head[0].data["response"]["id"]
    task = await wait_state(http, user.headers, task_id, ("completed", "incomplete"))
    assert task["output_tokens"] >= 1


async def test_retrieve_stream_replays_after_n_of_a_finished_response(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post("/v1/responses", json=body(), headers=user.headers) as r:
        done = await r.json()
    log = await events_of(http, user.headers, done["id"])
    for n in (0, 3, log[-2]["sequence_number"], log[-1]["sequence_number"]):
        async with http.get(
            f"/v1/responses/{done['id']}",
            params={"stream": "true", "starting_after": n},
            headers=user.headers,
        ) as r:
            assert r.status == 200
            events = parse_sse(await r.read())
        assert [(int(e.id), e.event) for e in events] == [p for p in public_view(log) if p[0] > n]


async def test_retrieve_stream_replays_then_follows_a_running_response(
    http: aiohttp.ClientSession, user: Client
) -> None:
    blocker = await occupy_model(http, user.headers)
    try:
        queued = await create_background(http, user.headers, max_output_tokens=16)
        async with http.get(
            f"/v1/responses/{queued['id']}",
            params={"stream": "true", "starting_after": "0"},
            headers=user.headers,
        ) as r:
            head = await read_sse_until(r, lambda e: e.event == "response.created")
            assert [e.event for e in head] == ["response.created"]
            await cancel(http, user.headers, blocker["id"])  # now the queued one runs
            events = head + parse_sse(await r.read())
    finally:
        await cancel(http, user.headers, blocker["id"])
    assert events[-1].event in ("response.completed", "response.incomplete")
    log = await events_of(http, user.headers, queued["id"])
    assert [(int(e.id), e.event) for e in events] == public_view(log)


async def test_task_events_json_pages(http: aiohttp.ClientSession, user: Client) -> None:
    async with http.post("/v1/responses", json=body(), headers=user.headers) as r:
        done = await r.json()
    path = f"/v1/tasks/{done['id']}/events"
    async with http.get(path, headers=user.headers) as r:
        everything = (await r.json())["data"]
    assert [e["sequence_number"] for e in everything] == list(range(1, len(everything) + 1))
    pages: list[dict[str, Any]] = []
    after = 0
    while True:
        async with http.get(path, params={"after": after, "limit": 3}, headers=user.headers) as r:
            page = await r.json()
        assert page["object"] == "list" and len(page["data"]) <= 3
        pages.extend(page["data"])
        if not page["has_more"]:
            break
        after = page["data"][-1]["sequence_number"]
    assert pages == everything
    async with http.get(path, params={"after": "x"}, headers=user.headers) as r:
        await expect_error(r, 400, param="after")


async def test_task_events_sse_has_every_event_type_and_resumes_by_last_event_id(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    # Unload the (idle) demo model so the next task has to load it: response.loading.
    live.call(live.core.runner._unload(MODEL))
    task = await create_background(http, user.headers, **LONG)
    path = f"/v1/tasks/{task['id']}/events"
    r = await http.get(path, headers={**user.headers, **SSE})
    assert r.headers["Content-Type"].startswith("text/event-stream")
    first = await read_sse_until(r, lambda e: e.event == "response.output_text.delta")
    r.close()  # a dropped connection
    last_id = first[-1].id
    await cancel(http, user.headers, task["id"])
    async with http.get(path, headers={**user.headers, **SSE, "Last-Event-ID": last_id}) as r:
        rest = parse_sse(await r.read())
    events = first + rest
    numbers = [int(e.id) for e in events]
    assert numbers == list(range(1, len(numbers) + 1))  # no gap, no repeat
    assert [e.data for e in events] == await events_of(http, user.headers, task["id"])
    types = [e.event for e in events]
    assert types[:5] == [
        "response.created",
        "response.loading",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert "response.cancelling" in types
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.cancelled",
    ]
    async with http.get(path, headers={**user.headers, **SSE, "Last-Event-ID": "x"}) as r:
        await expect_error(r, 400, param="Last-Event-ID")


async def test_task_events_sse_of_a_task_cancelled_while_queued(
    http: aiohttp.ClientSession, user: Client
) -> None:
    blocker = await occupy_model(http, user.headers)
    try:
        queued = await create_background(http, user.headers)
        path = f"/v1/tasks/{queued['id']}/events"
        async with http.get(path, headers={**user.headers, **SSE}) as r:
            head = await read_sse_until(r, lambda e: e.event == "response.created")
            await cancel(http, user.headers, queued["id"])
            events = head + parse_sse(await r.read())
        assert [e.event for e in events] == ["response.created", "response.cancelled"]
        async with http.get(
            f"/v1/responses/{queued['id']}", params={"stream": "true"}, headers=user.headers
        ) as r:
            shown = parse_sse(await r.read())
        assert [e.event for e in shown] == ["response.created", "error"]
        assert shown[-1].data["error"]["code"] == "cancelled"
    finally:
        await cancel(http, user.headers, blocker["id"])


def test_sse_streams_end_when_the_service_stops(tmp_path: Any) -> None:
    """Open streams are ended by a graceful stop instead of hanging the client."""
    other = LiveCore(tmp_path / "stop")
    token = other.token("admin")
    headers = {"Authorization": f"Bearer {token}"}

    async def scenario() -> None:
        async with aiohttp.ClientSession(base_url=other.url) as http:
            task = await create_background(http, headers, **LONG)
            r = await http.get(f"/v1/tasks/{task['id']}/events", headers={**headers, **SSE})
            await read_sse_until(r, lambda e: e.event == "response.output_text.delta")
            stopping = other.begin_stop()
            rest = await asyncio.wait_for(r.content.read(), 30)
            parse_sse(rest)
            await stopping

    try:
        asyncio.run(scenario())
    finally:
        other.stop()


@pytest.mark.parametrize("query", [{"stream": "maybe"}, {"stream": "true", "starting_after": "-1"}])
async def test_bad_stream_queries_are_400(
    http: aiohttp.ClientSession, user: Client, query: dict[str, str]
) -> None:
    task = await create_background(http, user.headers)
    async with http.get(f"/v1/responses/{task['id']}", params=query, headers=user.headers) as r:
        await expect_error(r, 400)
