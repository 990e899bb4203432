"""`POST /v1/models/pull`'s X-HF-Token header on the live service: a value that cannot be a
token is refused with 400 before anything is claimed or asked of the hub."""

from __future__ import annotations

import aiohttp

from tests.integration.service_fixtures import Client, expect_error

pytest_plugins = ["tests.integration.service_fixtures"]


async def test_a_hub_token_header_that_is_no_token_is_refused_and_its_key_stays_free(
    http: aiohttp.ClientSession, admin: Client
) -> None:
    key = {"Idempotency-Key": "pull-with-a-bad-token-header"}
    payload = {"repo": "not a repo"}  # refused before the hub is asked, in either case
    bad = {**admin.headers, **key, "X-HF-Token": "hf_abc def"}
    async with http.post("/v1/models/pull", json=payload, headers=bad) as r:
        error = await expect_error(r, 400)
        assert "X-HF-Token" in error["message"] and "hf_abc" not in error["message"]
    # The same key again, without the header: answered on its own (400 for the repo id),
    # not 409 as if the refused request still held the key.
    async with http.post("/v1/models/pull", json=payload, headers={**admin.headers, **key}) as r:
        error = await expect_error(r, 400)
        assert error["param"] == "repo", error
