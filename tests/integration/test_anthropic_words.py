"""On /v1/messages, Anthropic's words and shapes where its clients read them: an over-long
prompt (`prompt is too long: N tokens > M maximum`), routes it has not (405, 404) in its error
shape, its field names in errors (`input_schema`, `any`), `toolu_` ids, and count_tokens on a
file that is no model; over real HTTP with the demo model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.service_fixtures import MODEL, LiveCore
from tests.support.plain_http import anthropic_sdk, plain_client

pytest_plugins = ["tests.integration.service_fixtures"]

WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def web(live: LiveCore) -> Iterator[httpx.Client]:
    with plain_client(live) as client:
        yield client


def test_an_anthropic_prompt_too_long_says_so_in_anthropics_words(web: httpx.Client) -> None:
    words = [{"role": "user", "content": "word " * 9000}]
    counted = web.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": words})
    tokens = counted.json()["input_tokens"]
    refused = web.post("/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": words})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error", error
    # Claude Code's "Prompt is too long" and litellm's Anthropic mapping read these words;
    # our advice follows them.
    assert error["message"].startswith(f"prompt is too long: {tokens} tokens > 8192 maximum"), error
    assert "shorten the input" in error["message"], error
    # OpenAI's words stay on the OpenAI APIs (litellm's OpenAI mapping reads them).
    chat = web.post("/v1/chat/completions", json={"model": MODEL, "messages": words})
    assert chat.status_code == 400
    assert chat.json()["error"]["message"].startswith("This model's maximum context length")


def test_anthropic_routes_answer_in_anthropics_shape_and_names(web: httpx.Client) -> None:
    for answer in (web.get("/v1/messages"), web.post("/v1/messages/batches", json={})):
        assert answer.status_code in (404, 405)
        shape = answer.json()
        assert shape["type"] == "error" and shape["error"]["type"], shape
    # The fields as Anthropic names them, not as the shared (OpenAI) parser does.
    bad_schema = {**WEATHER, "input_schema": "a string"}
    body = {"model": MODEL, "max_tokens": 8, "messages": PARIS, "tools": [bad_schema]}
    error = web.post("/v1/messages", json=body).json()["error"]
    assert "tools[0].input_schema" in error["message"] and "parameters" not in error["message"]
    body = {"model": MODEL, "max_tokens": 8, "messages": PARIS, "tool_choice": {"type": "any"}}
    error = web.post("/v1/messages", json=body).json()["error"]
    assert '{"type": "any"}' in error["message"] and "required" not in error["message"], error
    # A tool call's id as Anthropic's (`toolu_`), in the message and in its stream.
    claude = anthropic_sdk(web)
    forced: Any = {"type": "tool", "name": "get_weather"}
    tools: Any = [WEATHER]
    asked: Any = {"model": MODEL, "max_tokens": 40, "messages": PARIS}
    asked["extra_body"] = {"temperature": 0}
    used = claude.messages.create(tools=tools, tool_choice=forced, **asked)
    call = next(b for b in used.content if b.type == "tool_use")
    assert call.id.startswith("toolu_"), call
    with claude.messages.stream(tools=tools, tool_choice=forced, **asked) as stream:
        started = [e.content_block for e in stream if e.type == "content_block_start"]
    assert next(b.id for b in started if b.type == "tool_use").startswith("toolu_")
    claude.close()
