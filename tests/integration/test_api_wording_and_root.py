"""What a caller is told, on a real service with the demo model: an id of its own that a route
of another API does not take (an Anthropic message or a chat completion at GET
/v1/responses/{id}, a response at GET /v1/chat/completions/{id}) is named for what it is,
with one code for every "no such id"; `GET /` and `HEAD /` answer as Ollama's root does; a
bad LMSP_TOKEN is named as the shell's to the `tasks` command; and a too-long input offers
`truncation: "auto"` only when there are older turns to drop."""

from __future__ import annotations

import aiohttp
import pytest

from tests.integration.serve_process import lmsp
from tests.integration.service_fixtures import MODEL, Client, LiveCore, expect_error

pytest_plugins = ["tests.integration.service_fixtures"]

SAY_HI = [{"role": "user", "content": "Say hi."}]
# Longer than the context the demo model can run with (trained for 8,192 tokens).
TOO_LONG = "word " * 9000


async def test_an_id_of_another_api_is_named_for_what_it_is(
    http: aiohttp.ClientSession, user: Client
) -> None:
    message = {"model": MODEL, "max_tokens": 4, "messages": SAY_HI}
    async with http.post("/v1/messages", json=message, headers=user.headers) as r:
        assert r.status == 200, await r.text()
        msg_id = (await r.json())["id"]
    chat = {"model": MODEL, "max_tokens": 4, "messages": SAY_HI}
    async with http.post("/v1/chat/completions", json=chat, headers=user.headers) as r:
        assert r.status == 200, await r.text()
        chat_id = (await r.json())["id"]
    response = {"model": MODEL, "input": "Say hi.", "max_output_tokens": 4}
    async with http.post("/v1/responses", json=response, headers=user.headers) as r:
        assert r.status == 200, await r.text()
        resp_id = (await r.json())["id"]

    for task_id, what in (
        (msg_id, "an anthropic.messages request"),
        (chat_id, "a chat.completions request"),
    ):
        async with http.get(f"/v1/responses/{task_id}", headers=user.headers) as r:
            error = await expect_error(r, 404, "response_not_found")
        told = error["message"]
        assert f"No response with id '{task_id}': that id is the task of {what}" in told, told
        assert f"not a response; GET /v1/tasks/{task_id}" in told, told
    # Its cancel says the same of it, with the article right.
    async with http.post(f"/v1/responses/{msg_id}/cancel", headers=user.headers) as r:
        error = await expect_error(r, 404, "response_not_found")
    assert "the task of an anthropic.messages request, not a response" in error["message"]

    # A response at the chat route: the same code as an unknown id there, and what it is.
    async with http.get(f"/v1/chat/completions/{resp_id}", headers=user.headers) as r:
        error = await expect_error(r, 404, "response_not_found")
    assert "that id is the task of a response, not a chat completion" in error["message"]
    async with http.get("/v1/chat/completions/chatcmpl-nothing", headers=user.headers) as r:
        await expect_error(r, 404, "response_not_found")


async def test_another_clients_id_reveals_nothing(
    http: aiohttp.ClientSession, user: Client, live: LiveCore
) -> None:
    message = {"model": MODEL, "max_tokens": 4, "messages": SAY_HI}
    async with http.post("/v1/messages", json=message, headers=user.headers) as r:
        msg_id = (await r.json())["id"]
    stranger = live.client("responses:read", "responses:write")
    async with http.get(f"/v1/responses/{msg_id}", headers=stranger.headers) as r:
        error = await expect_error(r, 404, "response_not_found")
    assert "anthropic" not in error["message"], error


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_the_root_answers_as_ollamas_does_without_a_token(
    http: aiohttp.ClientSession, method: str
) -> None:
    async with http.request(method, "/") as r:
        assert r.status == 200, await r.text()
        assert r.content_type == "text/plain"
        text = await r.text()
    assert text == ("Ollama is running" if method == "GET" else "")
    # Nothing else is public: a path below it still needs a token.
    async with http.get("/v1/models") as r:
        assert r.status == 401


def test_tasks_with_a_bad_lmsp_token_names_the_shells_token(
    live: LiveCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for token in (live.revoked_token(), "lmsp_" + "x" * 43):
        monkeypatch.setenv("LMSP_TOKEN", token)
        shown = lmsp("tasks", data_dir=live.data_dir)
        assert shown.returncode == 2, shown
        assert "LMSP_TOKEN is not a token of this service (revoked, or another service's)" in (
            shown.stderr
        ), shown.stderr
        assert "`lmsp-desktop token create`" in shown.stderr
        assert "Pair this client" not in shown.stderr, shown.stderr


async def test_truncation_is_offered_only_with_older_turns_to_drop(
    http: aiohttp.ClientSession, user: Client
) -> None:
    alone = {"model": MODEL, "input": TOO_LONG, "max_output_tokens": 4}
    async with http.post("/v1/responses", json=alone, headers=user.headers) as r:
        error = await expect_error(r, 400, "context_length_exceeded")
    assert "truncation" not in error["message"], error["message"]
    assert "Shorten it" in error["message"] or "shorten the input" in error["message"]

    turns = [
        {"role": "user", "content": TOO_LONG},
        {"role": "assistant", "content": "That is a lot of words."},
        {"role": "user", "content": "Say hi."},
    ]
    older = {"model": MODEL, "input": turns, "max_output_tokens": 4}
    async with http.post("/v1/responses", json=older, headers=user.headers) as r:
        error = await expect_error(r, 400, "context_length_exceeded")
    assert 'send `truncation: "auto"` to drop the oldest turns' in error["message"], error
    # And the advice holds: the same input with it is answered.
    async with http.post(
        "/v1/responses", json={**older, "truncation": "auto"}, headers=user.headers
    ) as r:
        assert r.status == 200, await r.text()
