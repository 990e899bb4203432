"""`POST /v1/chat/completions` on the wire: plain and streamed answers, every completion a task
(listed, evented, cancellable, idempotent), and 400s that name the field."""

from __future__ import annotations

import json
import uuid
from typing import Any

import aiohttp
import pytest

from tests.integration.service_fixtures import (
    MODEL,
    Client,
    events_of,
    expect_error,
    wait_state,
)

pytest_plugins = ["tests.integration.service_fixtures"]

SHORT = {"max_tokens": 12, "temperature": 0}
# At temperature 0 the demo model answers this in a few tokens and ends its turn.
FRANCE = [{"role": "user", "content": "What is the capital of France? One word."}]


def chat(**fields: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say hello."}],
        **SHORT,
        **fields,
    }


def data_lines(raw: bytes) -> list[str]:
    """The `data:` payloads of an SSE body, checking its framing (LF only, blank lines)."""
    text = raw.decode("utf-8")
    assert "\r" not in text and text.endswith("\n\n"), text[-200:]
    blocks = text[:-2].split("\n\n")
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks), blocks[:3]
    return [b[len("data: ") :] for b in blocks]


async def test_plain_completion_is_a_task_with_its_events(
    http: aiohttp.ClientSession, user: Client
) -> None:
    payload = chat(messages=[{"role": "system", "content": "Be brief."}, *FRANCE], max_tokens=24)
    async with http.post("/v1/chat/completions", json=payload, headers=user.headers) as r:
        completion = await r.json()
        assert r.status == 200, completion
    assert completion["id"].startswith("chatcmpl-")
    assert completion["object"] == "chat.completion" and completion["model"] == MODEL
    choice = completion["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    assert "Paris" in choice["message"]["content"]
    usage = completion["usage"]
    assert usage["prompt_tokens"] > 5 and 1 <= usage["completion_tokens"] <= 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # The task: listed, with its event log, marked as a chat completion.
    async with http.get("/v1/tasks", headers=user.headers) as r:
        listed = (await r.json())["data"]
    assert [t["id"] for t in listed] == [completion["id"]]
    assert listed[0]["api"] == "chat.completions" and listed[0]["mode"] == "sync"
    assert listed[0]["state"] == "completed"
    events = await events_of(http, user.headers, completion["id"])
    assert events[0]["type"] == "response.created"
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == choice["message"]["content"]


async def test_length_limit_reports_finish_reason_length(
    http: aiohttp.ClientSession, user: Client
) -> None:
    payload = chat(max_completion_tokens=3, max_tokens=50)  # the newer name wins
    async with http.post("/v1/chat/completions", json=payload, headers=user.headers) as r:
        completion = await r.json()
    assert completion["choices"][0]["finish_reason"] == "length"
    assert completion["usage"]["completion_tokens"] == 3


async def test_stream_sends_chunks_usage_and_done(
    http: aiohttp.ClientSession, user: Client
) -> None:
    payload = chat(messages=FRANCE, stream=True, stream_options={"include_usage": True})
    async with http.post("/v1/chat/completions", json=payload, headers=user.headers) as r:
        assert r.status == 200 and r.content_type == "text/event-stream"
        lines = data_lines(await r.read())
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    *content, last, usage_chunk = chunks
    assert last["choices"][0]["finish_reason"] == "stop" and last["usage"] is None
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] >= 1
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in content)
    assert "Paris" in text
    # Without include_usage there is no usage chunk and no usage key.
    async with http.post("/v1/chat/completions", json=chat(stream=True), headers=user.headers) as r:
        plain = [json.loads(x) for x in data_lines(await r.read())[:-1]]
    assert all("usage" not in c for c in plain) and plain[-1]["choices"][0]["finish_reason"]


async def test_stop_sequences_end_the_text_before_them(
    http: aiohttp.ClientSession, user: Client
) -> None:
    payload = chat(messages=FRANCE, max_tokens=24)
    async with http.post("/v1/chat/completions", json=payload, headers=user.headers) as r:
        full = (await r.json())["choices"][0]["message"]["content"]
    assert "Paris" in full
    stop = "aris"
    async with http.post(
        "/v1/chat/completions", json={**payload, "stop": [stop]}, headers=user.headers
    ) as r:
        cut = await r.json()
    assert cut["choices"][0]["message"]["content"] == full[: full.index(stop)]
    assert cut["choices"][0]["finish_reason"] == "stop"


async def test_closing_the_stream_cancels_the_task(
    http: aiohttp.ClientSession, user: Client
) -> None:
    payload = chat(
        messages=[{"role": "user", "content": "Write a very long story about a dragon."}],
        max_tokens=400,
        stream=True,
    )
    async with http.post("/v1/chat/completions", json=payload, headers=user.headers) as r:
        first = await r.content.readuntil(b"\n\n")
        task_id = json.loads(first[len(b"data: ") :])["id"]
        await wait_state(http, user.headers, task_id, ("running",))
        r.close()
    task = await wait_state(http, user.headers, task_id, ("cancelled",))
    assert task["api"] == "chat.completions"


async def test_cancel_by_task_route_fails_the_waiting_request(
    http: aiohttp.ClientSession, user: Client
) -> None:
    import asyncio

    payload = chat(
        messages=[{"role": "user", "content": "Write a very long story about a dragon."}],
        max_tokens=400,
    )
    waiting = asyncio.ensure_future(
        http.post("/v1/chat/completions", json=payload, headers=user.headers)
    )
    while True:
        async with http.get("/v1/tasks", headers=user.headers) as r:
            tasks = (await r.json())["data"]
        if tasks and tasks[0]["state"] == "running":
            break
        await asyncio.sleep(0.05)
    task_id = tasks[0]["id"]
    # A chat completion is not a response: the Responses routes do not know its id.
    async with http.post(f"/v1/responses/{task_id}/cancel", headers=user.headers) as r:
        await expect_error(r, 404, "response_not_found")
    async with http.get(f"/v1/responses/{task_id}", headers=user.headers) as r:
        await expect_error(r, 404)
    async with http.post(f"/v1/tasks/{task_id}/cancel", headers=user.headers) as r:
        assert r.status == 200 and (await r.json())["id"] == task_id
    async with await waiting as r:
        error = await expect_error(r, 409, "cancelled")
        assert r.headers["x-should-retry"] == "false"
    assert task_id in error["message"]


async def test_idempotency_key_replays_the_completion(
    http: aiohttp.ClientSession, user: Client
) -> None:
    headers = {**user.headers, "Idempotency-Key": uuid.uuid4().hex}
    async with http.post("/v1/chat/completions", json=chat(), headers=headers) as r:
        first = await r.json()
        assert r.status == 200 and "Idempotent-Replayed" not in r.headers
    async with http.post("/v1/chat/completions", json=chat(), headers=headers) as r:
        second = await r.json()
        assert r.headers["Idempotent-Replayed"] == "true"
    assert second == first
    async with http.post("/v1/chat/completions", json=chat(seed=1), headers=headers) as r:
        await expect_error(r, 422, "idempotency_key_reused")
    async with http.get("/v1/tasks", headers=user.headers) as r:
        assert [t["id"] for t in (await r.json())["data"]] == [first["id"]]


async def test_stored_completion_can_be_retrieved_unless_store_false(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post("/v1/chat/completions", json=chat(), headers=user.headers) as r:
        kept = await r.json()
    async with http.get(f"/v1/chat/completions/{kept['id']}", headers=user.headers) as r:
        assert r.status == 200 and (await r.json())["choices"] == kept["choices"]
    async with http.post("/v1/chat/completions", json=chat(store=False), headers=user.headers) as r:
        unkept = await r.json()
    async with http.get(f"/v1/chat/completions/{unkept['id']}", headers=user.headers) as r:
        await expect_error(r, 404)
    async with http.get(f"/v1/tasks/{unkept['id']}", headers=user.headers) as r:
        assert (await r.json())["stored"] is False


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        (
            {"tools": [{"type": "function", "function": {"name": "no spaces"}}]},
            "tools[0].function.name",
        ),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"logprobs": True}, "logprobs"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"model": "no-such-model"}, "model"),
    ],
)
async def test_what_cannot_be_honoured_is_400_naming_the_field(
    http: aiohttp.ClientSession, user: Client, fields: dict[str, Any], param: str
) -> None:
    async with http.post("/v1/chat/completions", json=chat(**fields), headers=user.headers) as r:
        await expect_error(r, 404 if param == "model" else 400, param=param)
    async with http.get("/v1/tasks", headers=user.headers) as r:
        assert (await r.json())["data"] == []  # nothing was created
