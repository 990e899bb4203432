"""A client's small mistakes get an answer that names them: a query parameter the task lists
do not read (a pager using `starting_after` on the events looped forever on page one), a
`model` of the wrong type ("is required" though it was sent), JSON nested too deeply."""

from __future__ import annotations

import aiohttp

from tests.integration.service_fixtures import Client, body, create_background, expect_error

pytest_plugins = ["tests.integration.service_fixtures"]


async def test_an_unknown_query_parameter_on_the_task_lists_is_refused(
    http: aiohttp.ClientSession, user: Client
) -> None:
    task = await create_background(http, user.headers, max_output_tokens=1)
    url = f"/v1/tasks/{task['id']}/events"
    async with http.get(url, params={"starting_after": "2"}, headers=user.headers) as r:
        assert r.status == 400
        error = (await r.json())["error"]
    assert error["param"] == "starting_after"
    assert "`after`" in error["message"], error
    async with http.get(url, params={"after": "0", "limit": "1"}, headers=user.headers) as r:
        assert r.status == 200  # the names it reads still page (event 1 is there at once)
        assert [e["sequence_number"] for e in (await r.json())["data"]] == [1]
    async with http.get("/v1/tasks", params={"statee": "running"}, headers=user.headers) as r:
        assert r.status == 400
        assert (await r.json())["error"]["param"] == "statee"


async def test_a_model_of_the_wrong_type_is_named_so(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post("/v1/responses", json=body(model=5), headers=user.headers) as r:
        error = await expect_error(r, 400, param="model")
    assert error["message"].startswith("`model` must be a string, not a number"), error
    async with http.post("/v1/responses", json={"input": "hi"}, headers=user.headers) as r:
        error = await expect_error(r, 400, param="model")
    assert error["message"].startswith("`model` is required"), error


async def test_json_nested_too_deeply_is_named_so(
    http: aiohttp.ClientSession, user: Client
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    headers = {**user.headers, "Content-Type": "application/json"}
    async with http.post("/v1/responses", data=deep, headers=headers) as r:
        error = await expect_error(r, 400, "invalid_json")
    assert "nested deeper than 1,024 levels" in error["message"], error
