"""Codex CLI's own requests, replayed byte for byte against the real service and demo model.

The bodies in tests/support/codex/ are what `codex exec` 0.171.0 sent to POST /v1/responses
(recorded through a loopback proxy; docs/clients.md "Codex CLI" has the run): its first turn with
the default features, whose tool listing alone pushes the prompt past the demo model's
8,192 tokens, and its first turn and tool-result turn with multi_agent and goals disabled.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.integration.service_fixtures import Client

pytest_plugins = ["tests.integration.service_fixtures"]

CODEX = Path(__file__).parent.parent / "support" / "codex"
CODEX_HEADERS = {"Accept": "text/event-stream", "Content-Type": "application/json"}


async def task_ids(http: aiohttp.ClientSession, client: Client) -> list[str]:
    async with http.get("/v1/tasks", headers=client.headers) as listed:
        return [t["id"] for t in (await listed.json())["data"]]


async def test_codex_default_first_turn_too_long_is_refused_before_a_task(
    http: aiohttp.ClientSession, user: Client
) -> None:
    """The prompt the model would see counts the tool listing too: a request whose tools
    push it past the context answers 400 context_length_exceeded, and no task is left
    failing behind it (Codex then says it ran out of room in the context window)."""
    body = (CODEX / "default_first_turn.json").read_bytes()
    async with http.post(
        "/v1/responses", data=body, headers={**user.headers, **CODEX_HEADERS}
    ) as answer:
        assert answer.status == 400, (await answer.text())[:300]
        error = (await answer.json())["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input")
    # The same count the runner makes of the prompt it builds (9,001 tokens with the listing).
    assert "is 9001 tokens long" in error["message"], error
    # The words clients tell a context error by (litellm, and so aider: else a plain
    # BadRequestError, and aider sent the same too-long prompt again for a minute).
    assert "This model's maximum context length is 8192 tokens" in error["message"], error
    assert await task_ids(http, user) == []
