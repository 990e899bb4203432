"""A request that waits for its answer and fails before any output gets an HTTP error with
the reason, as OpenAI answers (not a 200 carrying a failed body); its task stays visible."""

from __future__ import annotations

import aiohttp

from tests.integration.service_fixtures import (
    ALL_SCOPES,
    BROKEN,
    LiveCore,
    auth,
    expect_error,
    parse_sse,
)

pytest_plugins = ["tests.integration.service_fixtures"]


async def test_a_file_that_is_not_a_model_answers_an_error_with_the_reason(
    broken_live: LiveCore,
) -> None:
    headers = auth(broken_live.token(*ALL_SCOPES))
    async with aiohttp.ClientSession(base_url=broken_live.url) as http:
        async with http.post(
            "/v1/responses", json={"model": BROKEN, "input": "Hi"}, headers=headers
        ) as r:
            error = await expect_error(r, 500, "model_load_failed")
            assert r.headers["x-should-retry"] == "false"
        assert "broken.gguf" in error["message"]
        async with http.post(
            "/v1/chat/completions",
            json={"model": BROKEN, "messages": [{"role": "user", "content": "Hi"}]},
            headers=headers,
        ) as r:
            chat_error = await expect_error(r, 500, "model_load_failed")
        # Both tasks exist, failed, with the same reason.
        async with http.get("/v1/tasks", headers=headers) as r:
            tasks = (await r.json())["data"]
        assert [t["state"] for t in tasks] == ["failed", "failed"]
        assert [t["error"]["code"] for t in tasks] == ["model_load_failed"] * 2
        assert tasks[0]["id"] in chat_error["message"]
        # A stream has begun (200) before the failure: it ends with response.failed.
        async with http.post(
            "/v1/responses",
            json={"model": BROKEN, "input": "Hi", "stream": True},
            headers=headers,
        ) as r:
            assert r.status == 200
            events = [e.data for e in parse_sse(await r.read())]
        assert events[-1]["type"] == "response.failed"
        assert events[-1]["response"]["error"]["code"] == "model_load_failed"
