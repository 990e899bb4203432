"""Ollama's API with the official `ollama` Python client, unchanged, against the real service
and demo model: list, show, ps, chat (plain, streamed, tools), generate (options, format json
and schema), names with `:latest`, errors in Ollama's shape (model management included), and
each generation a task like any other."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import jsonschema
import pytest
from ollama import AsyncClient, Client, ResponseError

from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

SHORT: dict[str, Any] = {"temperature": 0, "num_predict": 12}
# As /api/tags names the model, and as Ollama's clients name a model without a tag.
TAGGED = f"{MODEL}:latest"


@pytest.fixture
def ollama(live: LiveCore) -> Iterator[Client]:
    token = live.token(*USER_SCOPES)
    client = Client(host=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
    yield client
    client._client.close()


def test_list_show_and_version(ollama: Client) -> None:
    [model] = [m for m in ollama.list().models if m.model == TAGGED]
    assert model.size and model.size > 50_000_000 and model.digest and len(model.digest) == 64
    assert model.details and model.details.format == "gguf"
    assert model.details.family == "llama" and model.details.quantization_level == "Q4_1"
    shown = ollama.show(MODEL)
    assert shown.details and shown.details.parameter_size == "135M"
    assert shown.modelinfo and shown.modelinfo["llama.context_length"] == 8192
    assert "im_start" in (shown.template or "")
    assert ollama._client.get("/api/version").json()["version"]


def test_chat_answers_with_counts_and_durations(ollama: Client, live: LiveCore) -> None:
    answer = ollama.chat(
        MODEL, [{"role": "user", "content": "Say hello."}], options=SHORT, stream=False
    )
    assert answer.message.role == "assistant" and answer.message.content
    assert answer.done and answer.done_reason in ("stop", "length")
    assert answer.prompt_eval_count and answer.prompt_eval_count > 5
    assert answer.eval_count and 0 < answer.eval_count <= 12
    assert answer.total_duration and answer.eval_duration is not None
    assert answer.total_duration >= answer.eval_duration
    # A task like any other, and the model is now loaded.
    running = [m.model for m in ollama.ps().models]
    assert TAGGED in running


async def test_keep_alive_zero_unloads_and_negative_keeps(live: LiveCore) -> None:
    from tests.support.polling import until

    token = live.token(*USER_SCOPES)
    client = AsyncClient(host=live.url, headers={"Authorization": f"Bearer {token}"})
    asked = [{"role": "user", "content": "Hi"}]
    try:
        await client.chat(MODEL, asked, options=SHORT, keep_alive=-1)
        [kept] = [m for m in (await client.ps()).models if m.model == TAGGED]
        assert kept.expires_at and kept.expires_at.year > 2100  # never, as Ollama shows it
        await client.chat(MODEL, asked, options=SHORT, keep_alive=0)

        async def unloaded() -> bool:
            return TAGGED not in [m.model for m in (await client.ps()).models]

        await until(unloaded, limit=30, what="the model unloaded after keep_alive 0")
        again = await client.chat(MODEL, asked, options=SHORT)  # loads it again
        assert again.done and again.load_duration and again.load_duration > 0
    finally:
        await client._client.aclose()


def test_chat_streams_ndjson_and_ends_with_done(ollama: Client) -> None:
    parts = list(
        ollama.chat(
            MODEL,
            [{"role": "user", "content": "Count from one to five."}],
            options=SHORT,
            stream=True,
        )
    )
    assert len(parts) > 3 and all(not p.done for p in parts[:-1])
    last = parts[-1]
    assert last.done and last.done_reason == "length" and last.eval_count == 12
    text = "".join(p.message.content or "" for p in parts)
    again = ollama.chat(
        MODEL, [{"role": "user", "content": "Count from one to five."}], options=SHORT
    )
    assert text == again.message.content  # greedy: the same text streamed or not


def test_generate_with_options(ollama: Client) -> None:
    answer = ollama.generate(
        MODEL,
        "Write a poem about the sea.",
        system="You are a poet.",
        options={"temperature": 0, "num_predict": 5, "stop": ["\n\n"]},
    )
    assert answer.response and answer.done_reason == "length" and answer.eval_count == 5
    streamed = "".join(
        p.response or ""
        for p in ollama.generate(
            MODEL,
            "Write a poem about the sea.",
            system="You are a poet.",
            options={"temperature": 0, "num_predict": 5},
            stream=True,
        )
    )
    assert streamed == answer.response


def test_top_k_one_samples_as_greedy(ollama: Client) -> None:
    greedy = ollama.generate(MODEL, "Name a color.", options={"temperature": 0, "num_predict": 8})
    for seed in (1, 2):
        hot = ollama.generate(
            MODEL,
            "Name a color.",
            options={"temperature": 1.5, "top_k": 1, "seed": seed, "num_predict": 8},
        )
        assert hot.response == greedy.response


def test_format_json_and_schema_go_through_the_grammar(ollama: Client) -> None:
    loose = ollama.generate(
        MODEL,
        "Reply with a JSON object holding a cat's name.",
        format="json",
        options={"temperature": 0, "num_predict": 80},
    )
    # Ended by the grammar's closing brace, not by the length: a whole JSON object.
    assert loose.done_reason == "stop"
    assert isinstance(json.loads(loose.response), dict)
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0, "maximum": 30},
        },
        "required": ["name", "age"],
    }
    shaped = ollama.chat(
        MODEL,
        [{"role": "user", "content": "Describe a cat with a name and an age."}],
        format=schema,
        options={"temperature": 0, "num_predict": 80},
    )
    jsonschema.validate(json.loads(shaped.message.content or ""), schema)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def test_tools_call_and_round_trip(ollama: Client, live: LiveCore) -> None:
    """The demo model does not call tools by itself: the LMSP extension `tool_choice` (as on
    Chat Completions) forces the call, sent raw; the round trip goes through the client."""
    asked = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = ollama._client.post(
        "/api/chat",
        json={
            "model": MODEL,
            "messages": asked,
            "tools": [WEATHER],
            "tool_choice": "required",
            "stream": False,
            "options": {"temperature": 0, "num_predict": 60},
        },
    )
    assert forced.status_code == 200, forced.text
    message = forced.json()["message"]
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(call["function"]["arguments"], WEATHER["function"]["parameters"])
    follow_up = [
        *asked,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_name": "get_weather", "content": "Sunny, 21 degrees."},
    ]
    final = ollama.chat(
        MODEL, follow_up, tools=[WEATHER], options={"temperature": 0, "num_predict": 30}
    )
    assert final.done and final.message.content and not final.message.tool_calls


def test_errors_have_ollamas_shape(ollama: Client, live: LiveCore) -> None:
    with pytest.raises(ResponseError) as unknown:
        ollama.chat("no-such-model", [{"role": "user", "content": "Hi"}])
    assert unknown.value.status_code == 404 and "no-such-model" in unknown.value.error
    assert "GET /api/tags" in unknown.value.error  # where an Ollama user finds the names
    with pytest.raises(ResponseError) as bad:
        ollama.generate(MODEL, "Hi", options={"temperature": "hot"})
    assert bad.value.status_code == 400 and "options.temperature" in bad.value.error
    with pytest.raises(ResponseError) as embed:
        ollama.embed("no-such-model", "Hi")
    assert embed.value.status_code == 404 and "no-such-model" in embed.value.error
    anonymous = Client(host=live.url)
    with pytest.raises(ResponseError) as refused:
        anonymous.list()
    anonymous._client.close()
    assert refused.value.status_code == 401 and "token" in refused.value.error.lower()


def test_think_answers_400_in_ollamas_words(ollama: Client) -> None:
    """No model here gives its thinking apart: `think` answers as Ollama answers it for a
    model that cannot think (clients look for those words and ask again without it), naming
    the model as sent; `think: false` is answered."""
    asked = [{"role": "user", "content": "Hi"}]
    with pytest.raises(ResponseError) as chat:
        ollama.chat(MODEL, asked, think=True, options=SHORT)
    assert chat.value.status_code == 400
    assert chat.value.error.startswith(f'"{MODEL}" does not support thinking')
    with pytest.raises(ResponseError) as generate:
        ollama.generate(TAGGED, "Hi", think="high", options=SHORT)
    assert generate.value.status_code == 400
    assert generate.value.error.startswith(f'"{TAGGED}" does not support thinking')
    answer = ollama.chat(MODEL, asked, think=False, options=SHORT, stream=False)
    assert answer.done and answer.message.content


def test_the_name_with_latest_is_the_same_model(ollama: Client) -> None:
    """ollama-python, Open WebUI and Continue name a model without a tag as `name:latest`;
    /api/tags shows that name, and every route that takes a name finds the model by it."""
    listed = [m.model for m in ollama.list().models]
    assert TAGGED in listed and MODEL not in listed
    shown = ollama.show(TAGGED)
    assert shown.details and shown.details.parameter_size == "135M"
    answer = ollama.chat(TAGGED, [{"role": "user", "content": "Say hello."}], options=SHORT)
    assert answer.model == TAGGED and answer.done and answer.message.content
    bare = ollama.chat(MODEL, [{"role": "user", "content": "Say hello."}], options=SHORT)
    assert bare.message.content == answer.message.content  # greedy: the same model
    generated = ollama.generate(TAGGED, "Name a color.", options=SHORT)
    assert generated.done and generated.response
    embedded = ollama.embed(TAGGED, "Hi")
    assert embedded.model == TAGGED and len(embedded.embeddings[0]) > 100
    assert TAGGED in [m.model for m in ollama.ps().models]


def test_ollamas_model_management_answers_in_ollamas_shape(ollama: Client) -> None:
    """Routes Ollama has and this service leaves to the window and the CLI: the client shows
    a sentence saying what to do instead (it showed a raw dict of OpenAI's shape before)."""
    for pull in (lambda: ollama.pull(MODEL), lambda: list(ollama.pull(MODEL, stream=True))):
        with pytest.raises(ResponseError) as pulled:
            pull()
        assert pulled.value.status_code == 404
        assert isinstance(pulled.value.error, str)
        assert pulled.value.error.startswith("POST /api/pull is not offered here")
        assert "lmsp-desktop models pull REPO[:QUANT]" in pulled.value.error
    for refused, says in (
        (lambda: ollama.delete(TAGGED), "ollama rm NAME"),
        (lambda: ollama.copy(TAGGED, "copy-of-it"), "does not copy or rename models"),
        (lambda: ollama.push(TAGGED), "does not push models"),
        (lambda: ollama.create("made", from_=TAGGED), "put a GGUF file in a model folder"),
    ):
        with pytest.raises(ResponseError) as answer:
            refused()
        assert answer.value.status_code == 404
        assert isinstance(answer.value.error, str) and says in answer.value.error


async def test_a_stream_whose_client_leaves_is_cancelled(live: LiveCore) -> None:
    token = live.token(*USER_SCOPES)
    headers = {"Authorization": f"Bearer {token}"}
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
        "options": {"temperature": 0, "num_predict": 400},
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{live.url}/api/chat", json=body, headers=headers) as response:
            assert response.headers["Content-Type"].startswith("application/x-ndjson")
            first = json.loads(await response.content.readline())
            assert first["done"] is False and "message" in first
        # Left after one line: the task is cancelled, with its partial output kept.
        from tests.support.polling import until

        async def cancelled() -> dict[str, Any] | None:
            async with http.get(f"{live.url}/v1/tasks", headers=headers) as listed:
                tasks = (await listed.json())["data"]
            return tasks[0] if tasks and tasks[0]["state"] == "cancelled" else None

        task = await until(cancelled, limit=60)
        assert task["model"] == MODEL
