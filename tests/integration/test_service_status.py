"""Every status code of the contract, against the real service with the real demo model."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import secrets
from pathlib import Path

import aiohttp
import pytest

from tests.integration.service_fixtures import (
    LONG,
    Client,
    LiveCore,
    auth,
    body,
    cancel,
    create_background,
    expect_error,
    occupy_model,
    wait_state,
)

pytest_plugins = ["tests.integration.service_fixtures"]


# -- 200 and 202 ------------------------------------------------------------------------------
async def test_sync_create_answers_200_with_the_finished_response(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post("/v1/responses", json=body(), headers=user.headers) as r:
        assert r.status == 200
        answer = await r.json()
    assert answer["object"] == "response"
    assert answer["status"] in ("completed", "incomplete")
    assert answer["output_text"].strip()
    assert answer["output"][0]["content"][0]["text"] == answer["output_text"]
    assert answer["usage"]["output_tokens"] >= 1
    assert answer["task"]["state"] in ("completed", "incomplete")
    assert answer["task"]["mode"] == "sync"


async def test_background_create_answers_202_with_location_after_commit(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post("/v1/responses", json=body(background=True), headers=user.headers) as r:
        assert r.status == 202
        accepted = await r.json()
        location = r.headers["Location"]
    assert accepted["status"] == "queued" and accepted["background"] is True
    assert location == f"/v1/responses/{accepted['id']}"
    # Committed before the answer: it is readable at once, and runs to the end.
    async with http.get(location, headers=user.headers) as r:
        assert r.status == 200
        assert (await r.json())["id"] == accepted["id"]
    task = await wait_state(http, user.headers, accepted["id"], ("completed", "incomplete"))
    assert task["output_tokens"] >= 1


async def test_unknown_fields_are_ignored(http: aiohttp.ClientSession, user: Client) -> None:
    async with http.post(
        "/v1/responses",
        json=body(background=True, frobnicate={"x": 1}, user="someone"),
        headers=user.headers,
    ) as r:
        assert r.status == 202, await r.text()


# -- 400 --------------------------------------------------------------------------------------
async def test_invalid_json_is_400(http: aiohttp.ClientSession, user: Client) -> None:
    for raw in (b"{not json", b"", b"\xff\xfe", b"[" * 100_000):
        async with http.post(
            "/v1/responses", data=raw, headers={**user.headers, "Content-Type": "application/json"}
        ) as r:
            await expect_error(r, 400, "invalid_json", None)
    async with http.post("/v1/responses", json=[1, 2], headers=user.headers) as r:
        await expect_error(r, 400, "invalid_json", None)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": None}, "model"),
        ({"model": 7}, "model"),
        ({"input": None}, "input"),
        ({"input": []}, "input"),
        ({"input": [{"role": "wizard", "content": "hi"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": 1.5}, "max_output_tokens"),
        ({"seed": "x"}, "seed"),
        ({"stream": "yes"}, "stream"),
        ({"background": 1}, "background"),
        ({"metadata": {"a": 1}}, "metadata"),
        ({"on_restart": "sometimes"}, "on_restart"),
        ({"instructions": ["be nice"]}, "instructions"),
        ({"truncation": "middle"}, "truncation"),
    ],
)
async def test_bad_fields_are_400_naming_the_field(
    http: aiohttp.ClientSession, user: Client, fields: dict[str, object], param: str
) -> None:
    async with http.post("/v1/responses", json=body(**fields), headers=user.headers) as r:
        await expect_error(r, 400, param=param)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (
            {"tools": [{"type": "function", "name": "f", "parameters": {"not": {}}}]},
            "tools[0].parameters.not",
        ),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "What is this?"},
                            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                        ],
                    }
                ]
            },
            "input[0].content[1].type",
        ),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
        (  # strict only: a non-strict schema's unenforceable keyword is dropped and noted
            {
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "x",
                        "strict": True,
                        "schema": {"uniqueItems": True},
                    }
                }
            },
            "text.format.schema.uniqueItems",
        ),
        ({"top_logprobs": 5}, "top_logprobs"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
        ({"tool_choice": "required"}, "tools"),  # required, but no tools sent
    ],
)
async def test_unsupported_features_are_400_naming_the_field(
    http: aiohttp.ClientSession, user: Client, fields: dict[str, object], param: str
) -> None:
    async with http.post("/v1/responses", json=body(**fields), headers=user.headers) as r:
        error = await expect_error(r, 400, param=param)
    assert error["code"] in ("unsupported_parameter", "invalid_value", "unsupported_schema")


async def test_bad_query_values_are_400(http: aiohttp.ClientSession, admin: Client) -> None:
    async with http.get("/v1/tasks", params={"limit": "lots"}, headers=admin.headers) as r:
        await expect_error(r, 400, param="limit")
    async with http.get("/v1/tasks", params={"state": "sleeping"}, headers=admin.headers) as r:
        await expect_error(r, 400, param="state")
    async with http.get("/v1/tasks", params={"after": "resp_nope"}, headers=admin.headers) as r:
        await expect_error(r, 404, param="after")  # an unknown id: 404, as the contract says


# -- 401 --------------------------------------------------------------------------------------
async def test_missing_malformed_unknown_and_revoked_tokens_are_401(
    http: aiohttp.ClientSession, live: LiveCore
) -> None:
    cases = [
        ({}, "missing_token"),
        ({"Authorization": ""}, "missing_token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "invalid_token"),
        ({"Authorization": "Bearer not-a-token"}, "invalid_token"),
        (auth("lmsp_" + secrets.token_urlsafe(32)), "invalid_token"),
        (auth(live.revoked_token()), "invalid_token"),
    ]
    for headers, code in cases:
        for method, path in (("GET", "/v1/models"), ("POST", "/v1/responses")):
            async with http.request(method, path, json=body(), headers=headers) as r:
                error = await expect_error(r, 401, code)
            assert error["type"] == "authentication_error"
            assert "lmsp-desktop token create" in error["message"]  # says what to do


async def test_health_needs_no_token(http: aiohttp.ClientSession) -> None:
    async with http.get("/v1/health") as r:
        assert r.status == 200
        health = await r.json()
    assert health["status"] == "ok" and health["service_id"] and health["version"]
    assert isinstance(health["uptime_s"], int)


# -- 403 --------------------------------------------------------------------------------------
async def test_missing_scope_is_403(http: aiohttp.ClientSession, live: LiveCore) -> None:
    reader = auth(live.token("models:read", "responses:read"))
    async with http.post("/v1/responses", json=body(), headers=reader) as r:
        error = await expect_error(r, 403, "insufficient_scope")
    assert "responses:write" in error["message"]


async def test_foreign_browser_origin_is_403_without_cors(
    http: aiohttp.ClientSession, user: Client
) -> None:
    headers = {**user.headers, "Origin": "http://evil.example"}
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/responses"), ("GET", "/v1/health")):
        async with http.request(method, path, json=body(), headers=headers) as r:
            await expect_error(r, 403, "origin_not_allowed")
            assert "Access-Control-Allow-Origin" not in r.headers


# -- 404 --------------------------------------------------------------------------------------
async def test_unknown_route_is_404(http: aiohttp.ClientSession, user: Client) -> None:
    for method, path in (
        ("GET", "/v1/nothing"),
        ("GET", "/index.html"),  # (GET / answers as Ollama's root: test_api_wording_and_root)
        ("POST", "/v2/responses"),
    ):
        async with http.request(method, path, headers=user.headers) as r:
            await expect_error(r, 404, "unknown_route")
    # A route that exists, with a method it does not take: 405 naming the allowed ones.
    async with http.put("/v1/responses", headers=user.headers) as r:
        await expect_error(r, 405, "method_not_allowed")
        assert r.headers["Allow"] == "POST"
    # /v1/models/pull is POST only, although GET /v1/models/{id} takes ids with a slash.
    for method in ("GET", "OPTIONS"):
        async with http.request(method, "/v1/models/pull", headers=user.headers) as r:
            await expect_error(r, 405, "method_not_allowed")
            assert r.headers["Allow"] == "POST"
    async with http.get("/v1/nothing") as r:  # no token: still a 404 for a route that is none
        await expect_error(r, 404, "unknown_route")


async def test_unknown_ids_are_404(http: aiohttp.ClientSession, admin: Client) -> None:
    missing = "resp_doesnotexist"
    for method, path in (
        ("GET", f"/v1/responses/{missing}"),
        ("GET", f"/v1/responses/{missing}?stream=true"),
        ("POST", f"/v1/responses/{missing}/cancel"),
        ("DELETE", f"/v1/responses/{missing}"),
        ("GET", f"/v1/tasks/{missing}"),
        ("GET", f"/v1/tasks/{missing}/events"),
        ("GET", "/v1/models/no-such-model"),
    ):
        async with http.request(method, path, headers=admin.headers) as r:
            await expect_error(r, 404)


async def test_unknown_model_is_404_model_not_found(
    http: aiohttp.ClientSession, user: Client
) -> None:
    for mode in ({}, {"background": True}, {"stream": True}):
        async with http.post(
            "/v1/responses", json=body(model="no-such-model", **mode), headers=user.headers
        ) as r:
            await expect_error(r, 404, "model_not_found", "model")


async def test_another_clients_task_is_404(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    other = live.client("models:read", "responses:read", "responses:write")
    mine = await create_background(http, user.headers)
    task_id = mine["id"]
    for method, path in (
        ("GET", f"/v1/responses/{task_id}"),
        ("GET", f"/v1/responses/{task_id}?stream=true"),
        ("POST", f"/v1/responses/{task_id}/cancel"),
        ("DELETE", f"/v1/responses/{task_id}"),
        ("GET", f"/v1/tasks/{task_id}"),
        ("GET", f"/v1/tasks/{task_id}/events"),
    ):
        async with http.request(method, path, headers=other.headers) as r:
            await expect_error(r, 404, "response_not_found")
    # ...and it was not cancelled by the other client's attempt.
    task = await wait_state(http, user.headers, task_id, ("completed", "incomplete"))
    assert task["client_id"] == user.id


# -- 409 --------------------------------------------------------------------------------------
async def test_cancel_of_a_finished_task_is_409_with_its_state(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post("/v1/responses", json=body(), headers=user.headers) as r:
        done = await r.json()
    async with http.post(f"/v1/responses/{done['id']}/cancel", headers=user.headers) as r:
        error = await expect_error(r, 409, "task_not_cancellable")
    assert error["state"] == done["task"]["state"]


async def test_delete_of_an_unfinished_task_is_409_then_works_once_finished(
    http: aiohttp.ClientSession, user: Client
) -> None:
    blocker = await occupy_model(http, user.headers)
    try:
        queued = await create_background(http, user.headers)
        for task_id, state in ((blocker["id"], "running"), (queued["id"], "queued")):
            async with http.delete(f"/v1/responses/{task_id}", headers=user.headers) as r:
                error = await expect_error(r, 409, "task_not_finished")
            assert error["state"] == state
        async with http.post(f"/v1/responses/{queued['id']}/cancel", headers=user.headers) as r:
            assert r.status == 200
            assert (await r.json())["status"] == "cancelled"
        async with http.delete(f"/v1/responses/{queued['id']}", headers=user.headers) as r:
            assert r.status == 200
            assert await r.json() == {"id": queued["id"], "object": "response", "deleted": True}
        async with http.get(f"/v1/responses/{queued['id']}", headers=user.headers) as r:
            await expect_error(r, 404)
    finally:
        await cancel(http, user.headers, blocker["id"])


async def test_cancel_twice_is_idempotent_200(http: aiohttp.ClientSession, user: Client) -> None:
    blocker = await create_background(http, user.headers, **LONG)
    await wait_state(http, user.headers, blocker["id"], ("running",))
    for _ in range(2):
        async with http.post(f"/v1/responses/{blocker['id']}/cancel", headers=user.headers) as r:
            assert r.status == 200
            assert (await r.json())["task"]["state"] in ("cancelling", "cancelled")
    task = await wait_state(http, user.headers, blocker["id"], ("cancelled",))
    assert task["finished_at"] is not None
    async with http.get(f"/v1/responses/{blocker['id']}", headers=user.headers) as r:
        cancelled = await r.json()
    # The partial output is kept.
    assert cancelled["status"] == "cancelled"
    assert cancelled["output"][0]["status"] == "incomplete"


# -- 413, 421 ---------------------------------------------------------------------------------
async def test_body_over_one_mebibyte_is_413(http: aiohttp.ClientSession, user: Client) -> None:
    # A stream, as aiohttp asks for bodies this large (raw bytes warn that they block the loop).
    big = io.BytesIO(json.dumps(body(input="x" * (1024 * 1024))).encode())
    async with http.post(
        "/v1/responses", data=big, headers={**user.headers, "Content-Type": "application/json"}
    ) as r:
        error = await expect_error(r, 413, "request_too_large")
    assert "1048576" in error["message"]


async def test_foreign_host_header_is_421(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    for host in (
        "evil.example",
        f"evil.example:{live.port}",
        f"127.0.0.1:{live.port + 1}",
        "192.168.1.10",
    ):
        async with http.get("/v1/models", headers={**user.headers, "Host": host}) as r:
            await expect_error(r, 421, "misdirected_request")
    for host in (
        f"localhost:{live.port}",
        f"127.0.0.1:{live.port}",
        "localhost",
        f"[::1]:{live.port}",
    ):
        async with http.get("/v1/models", headers={**user.headers, "Host": host}) as r:
            assert r.status == 200, (host, await r.text())


# -- 503 --------------------------------------------------------------------------------------
def test_shutting_down_refuses_new_work_with_503_and_ends_waiting_requests(
    tmp_path: Path,
) -> None:
    """A second Core on its own data dir: a sync request waiting when the service stops gets
    503 shutting_down (not a half-finished 200), and new work is refused with 503."""
    other = LiveCore(tmp_path / "stopping")
    token = other.token("admin")

    async def scenario() -> None:
        async with aiohttp.ClientSession(base_url=other.url) as http:
            waiting = asyncio.create_task(
                http.post("/v1/responses", json=body(**LONG), headers=auth(token))
            )
            tasks: list[dict[str, object]] = []
            while not tasks:  # created once the request is admitted (its tokens counted)
                await asyncio.sleep(0.05)
                async with http.get("/v1/tasks", headers=auth(token)) as r:
                    tasks = (await r.json())["data"]
            task_id = str(tasks[0]["id"])
            await wait_state(http, auth(token), task_id, ("running",))
            other.core.context.shutting_down = True  # what Core.stop() does first
            async with http.post("/v1/responses", json=body(), headers=auth(token)) as r:
                await expect_error(r, 503, "shutting_down")
            async with http.get("/v1/health") as r:
                assert (await r.json())["status"] == "shutting_down"
            stopping = other.begin_stop()
            response = await waiting
            await expect_error(response, 503, "shutting_down")
            response.release()
            await stopping

    try:
        asyncio.run(scenario())
    finally:
        other.stop()


# -- error shape everywhere -------------------------------------------------------------------
async def test_method_not_allowed_and_internal_shapes(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.request("PATCH", "/v1/tasks/resp_x", headers=user.headers) as r:
        assert r.status in (404, 405)
        await expect_error(r, r.status)


async def test_an_allow_listed_origin_gets_its_own_origin_back_never_a_wildcard(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    origins = live.core.context.settings.allowed_origins
    origins.append("http://trusted.example")
    try:
        async with http.get(
            "/v1/models", headers={**user.headers, "Origin": "http://trusted.example"}
        ) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == "http://trusted.example"
            assert r.headers["Vary"] == "Origin"
    finally:
        origins.remove("http://trusted.example")


async def test_a_sync_client_that_goes_away_cancels_its_task(
    http: aiohttp.ClientSession, user: Client
) -> None:
    waiting = asyncio.create_task(
        http.post("/v1/responses", json=body(**LONG), headers=user.headers)
    )
    task_id = None
    while task_id is None:
        await asyncio.sleep(0.05)
        async with http.get("/v1/tasks", headers=user.headers) as r:
            listed = (await r.json())["data"]
        task_id = listed[0]["id"] if listed else None
    await wait_state(http, user.headers, task_id, ("running",))
    waiting.cancel()  # the client gives up: its connection closes
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    task = await wait_state(http, user.headers, task_id, ("cancelled",), within=30)
    assert task["finished_at"] is not None
