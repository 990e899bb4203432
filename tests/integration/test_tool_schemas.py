"""Tool arguments held to the tool's schema, with real clients against the real service and
demo model: instructor in TOOLS mode, a forced non-strict tool through the openai SDK, and
zod's `.int()` bounds (LangChain.js sends them as this JSON) on both OpenAI APIs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field

from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

ZOD_INT = {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991}
BOOKING = {
    "type": "object",
    "properties": {
        "restaurant": {"type": "string"},
        "guests": {"type": "integer", "minimum": 1, "maximum": 12},
        "when": {
            "type": "object",
            "properties": {"day": {"type": "string"}, "hour": ZOD_INT},
            "required": ["day", "hour"],
        },
    },
    "required": ["restaurant", "guests", "when"],
}
ASK = "Book a table for four at Chez Marie on Friday at 8."


@pytest.fixture
def sdk(live: LiveCore) -> Iterator[OpenAI]:
    client = OpenAI(
        base_url=live.url + "/v1", api_key=live.token(*USER_SCOPES), max_retries=0, timeout=120
    )
    try:
        yield client
    finally:
        client.close()


class Rating(BaseModel):
    """A film's rating."""

    title: str
    stars: int = Field(ge=1, le=5)


def test_instructor_tools_mode_gets_a_valid_model(sdk: OpenAI) -> None:
    import instructor

    client = instructor.from_openai(sdk, mode=instructor.Mode.TOOLS)
    rating = client.chat.completions.create(
        model=MODEL,
        response_model=Rating,
        max_retries=1,  # one attempt: a reply that does not validate fails the test
        messages=[{"role": "user", "content": "Rate the film Alien from 1 to 5 stars."}],
        temperature=0,
        max_tokens=80,
    )
    assert isinstance(rating, Rating) and rating.title and 1 <= rating.stars <= 5


def test_a_forced_loose_tool_gets_arguments_that_follow_its_schema(sdk: OpenAI) -> None:
    # Without the schema's grammar the demo model wrote {"properties": {...}} here.
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": ASK}],
        tools=[{"type": "function", "function": {"name": "book", "parameters": BOOKING}}],
        tool_choice="required",
        temperature=0,
        max_tokens=120,
    )
    [call] = completion.choices[0].message.tool_calls or []
    assert call.function.name == "book"  # type: ignore[union-attr]
    jsonschema.validate(json.loads(call.function.arguments), BOOKING)  # type: ignore[union-attr]


def _zod_tool() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"a": ZOD_INT, "b": ZOD_INT},
        "required": ["a", "b"],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    }


def test_zod_int_passes_strict_on_chat_completions(sdk: OpenAI) -> None:
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Add 2 and 3."}],
        tools=[
            {
                "type": "function",
                "function": {"name": "add", "parameters": _zod_tool(), "strict": True},
            }
        ],
        tool_choice={"type": "function", "function": {"name": "add"}},
        temperature=0,
        max_tokens=60,
    )
    [call] = completion.choices[0].message.tool_calls or []
    jsonschema.validate(json.loads(call.function.arguments), _zod_tool())  # type: ignore[union-attr]


def test_zod_int_passes_strict_on_responses(sdk: OpenAI) -> None:
    response = sdk.responses.create(
        model=MODEL,
        input="Add 2 and 3.",
        tools=[{"type": "function", "name": "add", "parameters": _zod_tool(), "strict": True}],
        tool_choice="required",
        temperature=0,
        max_output_tokens=60,
    )
    [call] = [item for item in response.output if item.type == "function_call"]
    jsonschema.validate(json.loads(call.arguments), _zod_tool())


def test_keywords_a_loose_schema_cannot_enforce_are_noted_on_the_task(
    sdk: OpenAI, live: LiveCore
) -> None:
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "required": ["tags"],
    }
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tag this: a red apple."}],
        tools=[{"type": "function", "function": {"name": "tag", "parameters": schema}}],
        tool_choice="required",
        temperature=0,
        max_tokens=60,
    )
    [call] = completion.choices[0].message.tool_calls or []
    assert isinstance(json.loads(call.function.arguments)["tags"], list)  # type: ignore[union-attr]
    row = live.call(live.core.store.tasks.get(completion.id))
    assert json.loads(row["request"])["schema_notes"] == [
        "tools[0].function.parameters.properties.tags.uniqueItems"
    ]


def test_json_object_with_a_schema_follows_the_schema(sdk: OpenAI) -> None:
    """`response_format: {"type": "json_object", "schema": …}` (llama-server's extension;
    instructor 1.3's JSON_SCHEMA mode sends it): the schema is followed, as there. It was
    ignored: the demo model wrote free JSON ({"rating": 4.5, "star_rating": 4.5}), which
    failed instructor's validation. Keys no model would choose unasked show it is followed."""
    schema = {
        "type": "object",
        "properties": {
            "zq_title": {"type": "string"},
            "zq_stars": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["zq_title", "zq_stars"],
        "additionalProperties": False,
    }
    completion = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Rate the film Alien from 1 to 5 stars, in JSON."}],
        response_format={"type": "json_object", "schema": schema},  # type: ignore[typeddict-unknown-key]
        temperature=0,
        max_tokens=80,
    )
    content = completion.choices[0].message.content
    assert content is not None
    jsonschema.validate(json.loads(content), schema)
