"""A chat client resending a growing conversation: the service's engine evaluates only the
new part of each turn, and /v1/metrics shows the prefix cache's hits and tokens reused."""

from __future__ import annotations

from typing import Any

import aiohttp

from tests.integration.service_fixtures import MODEL, Client

pytest_plugins = ["tests.integration.service_fixtures"]


async def scrape(http: aiohttp.ClientSession, admin: Client) -> dict[str, float]:
    async with http.get("/v1/metrics", headers=admin.headers) as r:
        assert r.status == 200
        text = await r.text()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("lmsp_prefix_cache_")
    }


async def ask(http: aiohttp.ClientSession, user: Client, messages: list[dict[str, Any]]) -> Any:
    body = {"model": MODEL, "input": messages, "max_output_tokens": 12, "temperature": 0}
    async with http.post("/v1/responses", json=body, headers=user.headers) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_the_second_turn_reuses_the_first_and_metrics_say_so(
    http: aiohttp.ClientSession, admin: Client, user: Client
) -> None:
    system = {"role": "system", "content": "You answer briefly and kindly. " * 6}
    turn1 = [system, {"role": "user", "content": "Name a colour of the sky."}]
    first = await ask(http, user, turn1)
    before = await scrape(http, admin)
    turn2 = [
        *turn1,
        {"role": "assistant", "content": first["output_text"]},
        {"role": "user", "content": "And of grass?"},
    ]
    second = await ask(http, user, turn2)
    after = await scrape(http, admin)
    assert after["lmsp_prefix_cache_lookups_total"] == before["lmsp_prefix_cache_lookups_total"] + 1
    assert after["lmsp_prefix_cache_hits_total"] == before["lmsp_prefix_cache_hits_total"] + 1
    reused = (
        after["lmsp_prefix_cache_tokens_reused_total"]
        - before["lmsp_prefix_cache_tokens_reused_total"]
    )
    evaluated = (
        after["lmsp_prefix_cache_tokens_evaluated_total"]
        - before["lmsp_prefix_cache_tokens_evaluated_total"]
    )
    # The whole first turn came from the cache; only the new turn was evaluated.
    assert reused >= first["usage"]["input_tokens"]
    assert reused + evaluated == second["usage"]["input_tokens"]
    assert evaluated < second["usage"]["input_tokens"] / 2
