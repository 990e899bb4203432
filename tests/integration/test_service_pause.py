"""Pause new work (drain): new responses get 503 `paused`, accepted tasks still finish."""

from __future__ import annotations

import aiohttp

from tests.integration.service_fixtures import (
    Client,
    LiveCore,
    body,
    expect_error,
    wait_state,
)

pytest_plugins = ["tests.integration.service_fixtures"]


async def test_paused_service_refuses_new_work_and_finishes_accepted_tasks(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    async with http.post("/v1/responses", json=body(background=True), headers=user.headers) as r:
        assert r.status == 202
        accepted = await r.json()
    live.core.pause(True)
    try:
        async with http.post(
            "/v1/responses", json=body(background=True), headers=user.headers
        ) as r:
            await expect_error(r, 503, "paused")
        task = await wait_state(http, user.headers, accepted["id"], ("completed", "incomplete"))
        assert task["output_tokens"] >= 1
    finally:
        live.core.pause(False)
    async with http.post("/v1/responses", json=body(background=True), headers=user.headers) as r:
        assert r.status == 202
