"""Function tools and structured output with real clients, unchanged, against the real
service and demo model: the official `openai` SDK (Responses) and openai-agents.

The 135M demo model needs `tool_choice` required or named and strict schemas for a call to
come deterministically; `auto` parsing is tested with a scripted engine
(tests/unit/core/test_runner_tools.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from pydantic import BaseModel, ConfigDict, Field

from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
QUESTION = "What is the weather in Paris?"
SETTINGS: dict[str, Any] = {"temperature": 0, "max_output_tokens": 60}


@pytest.fixture
def sdk(live: LiveCore) -> Iterator[OpenAI]:
    client = OpenAI(
        base_url=live.url + "/v1", api_key=live.token(*USER_SCOPES), max_retries=0, timeout=120
    )
    try:
        yield client
    finally:
        client.close()


class Trip(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str
    days: int


def test_responses_tool_round_trip(sdk: OpenAI) -> None:
    first = sdk.responses.create(
        model=MODEL,
        input=QUESTION,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        parallel_tool_calls=False,
        **SETTINGS,
    )
    assert first.status == "completed"
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.call_id
    assert set(json.loads(call.arguments)) == {"city"}
    answer = sdk.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": QUESTION},
            call.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"type": "function_call_output", "call_id": call.call_id, "output": "22 C, sunny"},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
        **SETTINGS,
    )
    assert answer.status in ("completed", "incomplete")
    assert answer.output_text and answer.output[0].type == "message"


def test_responses_tool_round_trip_through_previous_response_id(sdk: OpenAI) -> None:
    first = sdk.responses.create(
        model=MODEL,
        input=QUESTION,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        **SETTINGS,
    )
    call = next(item for item in first.output if item.type == "function_call")
    answer = sdk.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "22 C, sunny"}],
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="none",
        **SETTINGS,
    )
    assert answer.previous_response_id == first.id
    assert answer.output_text and answer.output[0].type == "message"
    items = sdk.responses.input_items.list(answer.id, order="asc").data
    assert [i.type for i in items] == ["function_call_output"]


def test_responses_tool_call_streamed(sdk: OpenAI) -> None:
    names, deltas, done = [], [], []
    with sdk.responses.stream(
        model=MODEL,
        input=QUESTION,
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        **SETTINGS,
    ) as stream:
        for event in stream:
            if event.type == "response.output_item.added" and event.item.type == "function_call":
                names.append(event.item.name)
            elif event.type == "response.function_call_arguments.delta":
                deltas.append(event.delta)
            elif event.type == "response.function_call_arguments.done":
                done.append(event.arguments)
        final = stream.get_final_response()
    assert names == ["get_weather"]
    assert len(deltas) > 1 and done == ["".join(deltas)]
    call = final.output[0]
    assert call.type == "function_call" and call.arguments == done[0]
    assert json.loads(call.arguments)["city"]


def test_responses_parse_with_a_pydantic_model(sdk: OpenAI) -> None:
    parsed = sdk.responses.parse(
        model=MODEL, input="Plan a three-day trip to Rome.", text_format=Trip, **SETTINGS
    )
    assert isinstance(parsed.output_parsed, Trip)
    assert parsed.output_parsed.city


# On the test's one loop (Runner.run, not run_sync), with the client closed at the end: a
# run_sync loop per test left httpx's auth generator to be scheduled on a closed loop.
@pytest.mark.parametrize("api", ["responses", "chat.completions"])
async def test_openai_agents_tool_and_output_type(live: LiveCore, api: str) -> None:
    from agents import (
        Agent,
        AgentHooks,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    seen: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        seen.append(city)
        return f"22 C and sunny in {city}"

    class Weather(BaseModel):
        city: str = Field(max_length=40)
        summary: str = Field(max_length=80)

    class AnswerAfterTheTool(AgentHooks[Any]):
        """Call the tool once, then answer: a 135M model left to `auto` calls it again."""

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
            agent.model_settings = dataclasses.replace(agent.model_settings, tool_choice="none")

    client = AsyncOpenAI(base_url=live.url + "/v1", api_key=live.token(*USER_SCOPES), max_retries=0)
    agent = Agent(
        name="weather",
        instructions="Use the get_weather tool, then answer.",
        tools=[get_weather],
        output_type=Weather,
        model=(
            OpenAIResponsesModel(model=MODEL, openai_client=client)
            if api == "responses"
            else OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        ),
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=120),
        reset_tool_choice=False,
        hooks=AnswerAfterTheTool(),
    )
    try:
        result = await Runner.run(
            agent, QUESTION, max_turns=4, run_config=RunConfig(tracing_disabled=True)
        )
    finally:
        await client.close()
    assert len(seen) == 1 and seen[0]  # the tool ran once, with the arguments the model gave
    assert isinstance(result.final_output, Weather) and result.final_output.city


# -- Chat Completions --------------------------------------------------------------------------
CHAT_WEATHER = {
    "type": "function",
    "function": {k: v for k, v in WEATHER.items() if k != "type"},
}
CHAT_SETTINGS: dict[str, Any] = {"temperature": 0, "max_tokens": 60}


def test_chat_tool_round_trip(sdk: OpenAI) -> None:
    question = {"role": "user", "content": QUESTION}
    first = sdk.chat.completions.create(
        model=MODEL,
        messages=[question],  # type: ignore[list-item]
        tools=[CHAT_WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        **CHAT_SETTINGS,
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert set(json.loads(calls[0].function.arguments)) == {"city"}  # type: ignore[union-attr]
    answer = sdk.chat.completions.create(
        model=MODEL,
        messages=[
            question,  # type: ignore[list-item]
            choice.message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": calls[0].id, "content": "22 C, sunny"},
        ],
        tools=[CHAT_WEATHER],  # type: ignore[list-item]
        **CHAT_SETTINGS,
    )
    assert answer.choices[0].message.content
    assert answer.choices[0].finish_reason in ("stop", "length")


def test_chat_tool_call_streamed(sdk: OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[CHAT_WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
        **CHAT_SETTINGS,
    )
    names, pieces, reasons, ids = [], [], [], []
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        for call in choice.delta.tool_calls or []:
            assert call.index == 0
            if call.id:
                ids.append(call.id)
            if call.function and call.function.name:
                names.append(call.function.name)
            if call.function and call.function.arguments:
                pieces.append(call.function.arguments)
        if choice.finish_reason:
            reasons.append(choice.finish_reason)
    assert names == ["get_weather"] and len(ids) == 1
    assert len(pieces) > 1 and json.loads("".join(pieces))["city"]
    assert reasons == ["tool_calls"]


def test_chat_completions_parse_with_a_pydantic_model(sdk: OpenAI) -> None:
    completion = sdk.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "Plan a three-day trip to Rome."}],
        response_format=Trip,
        **CHAT_SETTINGS,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Trip) and parsed.city


def test_a_codex_like_first_request_is_served(sdk: OpenAI) -> None:
    """Codex sends hosted tools, a namespace and loose function schemas on every request."""
    shell = {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "array", "items": {"type": "string"}},
                "timeout_ms": {"type": "number", "minimum": 0},  # fine: not strict
            },
            "required": ["command"],
        },
    }
    tools = [
        shell,
        {"type": "web_search"},
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
        {"type": "namespace", "name": "mcp__docs", "tools": [{**WEATHER, "strict": False}]},
        {"type": "mcp", "server_label": "github", "server_url": "https://example.com/mcp"},
    ]
    response = sdk.responses.create(
        model=MODEL,
        instructions="You are a coding agent.",
        input="List the files.",
        tools=tools,  # type: ignore[arg-type]
        tool_choice="auto",
        parallel_tool_calls=False,
        stream=False,
        # The claim is that the request is served and which tools it kept, not the words:
        # the demo model wrote all 60 tokens of SETTINGS here (~1 CPU-s of decoding).
        **{**SETTINGS, "max_output_tokens": 8},
    )
    assert response.status in ("completed", "incomplete")
    assert [t.name for t in response.tools] == ["shell", "get_weather"]  # type: ignore[union-attr]
    assert response.model_extra and response.model_extra["task"]["dropped_tools"] == [
        "web_search",
        "custom:apply_patch",
        "mcp:github",
    ]


def test_unenforceable_schemas_are_refused_naming_the_keyword(sdk: OpenAI) -> None:
    import openai

    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}
    with pytest.raises(openai.BadRequestError) as chat:
        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "A number?"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": schema, "strict": True},
            },
            **CHAT_SETTINGS,
        )
    assert chat.value.param == "response_format.json_schema.schema.properties.n.multipleOf"
    with pytest.raises(openai.BadRequestError) as responses:
        sdk.responses.create(
            model=MODEL,
            input="A number?",
            tools=[{**WEATHER, "parameters": schema}],  # type: ignore[list-item]
            **SETTINGS,
        )
    assert responses.value.param == "tools[0].parameters.properties.n.multipleOf"
