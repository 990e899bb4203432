"""Number bounds held by the output grammar on every API, with the real demo model through a
real running service: an Anthropic forced tool call with `(0, 1)`, Chat Completions with a
non-strict `[0.1, 0.9]`, `responses.parse` with pydantic's `Field(gt=0, lt=1)` (strict by
default: it answered 400), Ollama's `format`; and a keyword the grammar cannot enforce named
in the task's notes, which GET /v1/tasks/{id} and the answer's task show."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from pydantic import BaseModel, Field

from tests.integration.serve_process import call
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore, task_object_of

pytest_plugins = ["tests.integration.service_fixtures"]

OPEN_UNIT = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
RATE = {
    "name": "rate",
    "description": "How sure you are that the sentence is true, strictly between 0 and 1.",
    "input_schema": {
        "type": "object",
        "properties": {"confidence": OPEN_UNIT},
        "required": ["confidence"],
    },
}
# Sampled hot so that the digits vary from run to run.
HOT = {"temperature": 1.0, "max_tokens": 40}


@pytest.fixture
def token(live: LiveCore) -> str:
    return live.token(*USER_SCOPES)


@pytest.fixture
def sdk(live: LiveCore, token: str) -> Iterator[OpenAI]:
    client = OpenAI(base_url=live.url + "/v1", api_key=token, max_retries=0, timeout=120)
    try:
        yield client
    finally:
        client.close()


def test_anthropic_forced_call_keeps_an_open_range(live: LiveCore, token: str) -> None:
    """The reviewer's repro: confidence came back as 10, 1.0 and 0, with no note. (Anthropic
    takes no seed: each run samples afresh.)"""
    for _ in range(4):
        status, message = call(
            live.url + "/v1/messages",
            token,
            "POST",
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "Paris is in France. Rate it."}],
                "tools": [RATE],
                "tool_choice": {"type": "any"},
                **HOT,
            },
            {"anthropic-version": "2023-06-01"},
            timeout=120,
        )
        assert status == 200, message
        [use] = [block for block in message["content"] if block["type"] == "tool_use"]
        confidence = use["input"]["confidence"]
        assert isinstance(confidence, (int, float)) and 0 < confidence < 1, use
        assert message["task"]["notes"] == []  # nothing left out of the grammar


def test_chat_completions_loose_tool_keeps_fractional_bounds(sdk: OpenAI) -> None:
    bounds = {"type": "number", "minimum": 0.1, "maximum": 0.9}
    schema = {"type": "object", "properties": {"x": bounds}, "required": ["x"]}
    for seed in (1, 2, 3):
        completion = sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Pick a number."}],
            tools=[{"type": "function", "function": {"name": "pick", "parameters": schema}}],
            tool_choice="required",
            seed=seed,
            **HOT,  # type: ignore[arg-type]
        )
        [tool_call] = completion.choices[0].message.tool_calls or []
        x = json.loads(tool_call.function.arguments)["x"]  # type: ignore[union-attr]
        assert 0.1 <= x <= 0.9, (seed, x)


class Verdict(BaseModel):
    """A verdict and how sure it is."""

    true: bool
    confidence: float = Field(gt=0, lt=1)


def test_responses_parse_with_exclusive_pydantic_bounds(sdk: OpenAI) -> None:
    """Responses formats are strict: an exclusive range answered 400 ("the bounds leave no
    value the grammar can write"), so `responses.parse` failed outright."""
    for seed in (4, 5):
        response = sdk.responses.parse(
            model=MODEL,
            input="Is Paris in France? Answer with how sure you are.",
            text_format=Verdict,
            temperature=1.0,
            max_output_tokens=40,
            extra_body={"seed": seed},
        )
        verdict = response.output_parsed
        assert verdict is not None and 0 < verdict.confidence < 1, response.output_text


def test_ollama_format_keeps_an_open_range(live: LiveCore, token: str) -> None:
    schema = {"type": "object", "properties": {"confidence": OPEN_UNIT}, "required": ["confidence"]}
    for seed in (6, 7):
        status, answer = call(
            live.url + "/api/chat",
            token,
            "POST",
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "How sure are you that 2+2=4? JSON."}],
                "format": schema,
                "stream": False,
                "options": {"temperature": 1.0, "seed": seed, "num_predict": 40},
            },
            timeout=120,
        )
        assert status == 200, answer
        confidence = json.loads(answer["message"]["content"])["confidence"]
        assert 0 < confidence < 1, (seed, confidence)


def _loose_multiple_of() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"n": {"type": "number", "minimum": 0, "maximum": 10, "multipleOf": 0.5}},
        "required": ["n"],
    }


def test_a_dropped_keyword_is_named_in_the_task_notes(
    live: LiveCore, token: str, sdk: OpenAI
) -> None:
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Pick a number."}],
        tools=[
            {
                "type": "function",
                "function": {"name": "pick", "parameters": _loose_multiple_of()},
            }
        ],
        tool_choice="required",
        temperature=0,
        max_tokens=30,
    )
    [tool_call] = completion.choices[0].message.tool_calls or []
    n = json.loads(tool_call.function.arguments)["n"]  # type: ignore[union-attr]
    assert 0 <= n <= 10  # the bounds still hold; only multipleOf is left out
    [note] = task_object_of(live, token, completion.id)["notes"]
    assert "tools[0].function.parameters.properties.n.multipleOf" in note

    status, message = call(
        live.url + "/v1/messages",
        token,
        "POST",
        {
            "model": MODEL,
            "max_tokens": 30,
            "temperature": 0,
            "messages": [{"role": "user", "content": "Pick a number."}],
            "tools": [{"name": "pick", "input_schema": _loose_multiple_of()}],
            "tool_choice": {"type": "any"},
        },
        timeout=120,
    )
    assert status == 200, message
    [note] = message["task"]["notes"]
    assert "tools[0].input_schema.properties.n.multipleOf" in note  # Anthropic's field name
    assert task_object_of(live, token, message["id"])["notes"] == [note]
