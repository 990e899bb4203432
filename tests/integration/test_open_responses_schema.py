"""Open Responses conformance (issue 9): every response object and streaming event the
service produces with the real demo model validates against the normative OpenAPI document
(`openresponses-openapi.json`, JSON Schema Draft 2020-12 with its $refs resolved)."""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from lmsp_desktop.core.engines.base import LoadedModel
from lmsp_desktop.core.engines.llama import LlamaEngine, LlamaModel
from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.service_fixtures import (
    BROKEN,
    LONG,
    MODEL,
    Client,
    LiveCore,
    auth,
    body,
    cancel,
    create_background,
    events_of,
    parse_sse,
    read_sse_until,
    wait_state,
)

pytest_plugins = ["tests.integration.service_fixtures"]

REPO = Path(__file__).resolve().parents[2]
# The normative document: vendored next to the tests, or the project's shared spec folder.
SPEC_CANDIDATES = [
    Path(__file__).with_name("openresponses-openapi.json"),
    REPO.parent / "shared" / "spec" / "openresponses-openapi.json",
]
SPEC_URI = "urn:open-responses:openapi"

EVENT_SCHEMAS = {
    "response.created": "ResponseCreatedStreamingEvent",
    "response.queued": "ResponseQueuedStreamingEvent",
    "response.in_progress": "ResponseInProgressStreamingEvent",
    "response.completed": "ResponseCompletedStreamingEvent",
    "response.failed": "ResponseFailedStreamingEvent",
    "response.incomplete": "ResponseIncompleteStreamingEvent",
    "response.output_item.added": "ResponseOutputItemAddedStreamingEvent",
    "response.output_item.done": "ResponseOutputItemDoneStreamingEvent",
    "response.content_part.added": "ResponseContentPartAddedStreamingEvent",
    "response.content_part.done": "ResponseContentPartDoneStreamingEvent",
    "response.output_text.delta": "ResponseOutputTextDeltaStreamingEvent",
    "response.output_text.done": "ResponseOutputTextDoneStreamingEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaStreamingEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneStreamingEvent",
    "error": "ErrorStreamingEvent",
}
# LMSP's own events, "shaped alike": type, sequence_number and a full response.
LMSP_EVENTS = {"response.loading", "response.cancelling", "response.cancelled", "response.resumed"}
STANDARD_ORDER = re.compile(
    r"response\.created response\.in_progress response\.output_item\.added "
    r"response\.content_part\.added (response\.output_text\.delta )+"
    r"response\.output_text\.done response\.content_part\.done response\.output_item\.done "
    r"response\.(completed|incomplete)"
)
CHECKS: collections.Counter[str] = collections.Counter()


def _spec() -> dict[str, Any]:
    for candidate in SPEC_CANDIDATES:
        if candidate.exists():
            return json.loads(candidate.read_text())  # type: ignore[no-any-return]
    raise AssertionError(f"openresponses-openapi.json not found in {SPEC_CANDIDATES}")


SPEC = _spec()
REGISTRY: Registry = Registry().with_resource(
    SPEC_URI, Resource.from_contents(SPEC, default_specification=DRAFT202012)
)
_VALIDATORS: dict[str, Draft202012Validator] = {}


def validator(name: str) -> Draft202012Validator:
    if name not in _VALIDATORS:
        assert name in SPEC["components"]["schemas"], name
        schema = {"$ref": f"{SPEC_URI}#/components/schemas/{name}"}
        _VALIDATORS[name] = Draft202012Validator(schema, registry=REGISTRY)
    return _VALIDATORS[name]


def validate(instance: Any, name: str) -> None:
    """Validate against one schema of the document, reporting every violation."""
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.path))
    assert not errors, f"{name}: " + "; ".join(
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors[:10]
    )
    CHECKS[name] += 1


def check_response(response: dict[str, Any], text_format: str = "text") -> None:
    """A valid ResponseResource, plus what the schema alone cannot say (LMSP_API.md)."""
    validate(response, "ResponseResource")
    assert response["text"]["format"]["type"] == text_format
    for key in (
        "temperature",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "top_logprobs",
        "service_tier",
        "truncation",
        "store",
        "background",
        "parallel_tool_calls",
    ):
        assert response[key] is not None, key
    for item in response["output"]:
        if item["type"] == "function_call":
            validate(item, "FunctionCall")
            continue
        validate(item, "Message")
        assert item["role"] == "assistant"
        for part in item["content"]:
            validate(part, "OutputTextContent")
            assert part["annotations"] == []
    finished = response["status"] in ("completed", "incomplete", "failed", "cancelled")
    if response["status"] in ("completed", "incomplete"):
        assert isinstance(response["completed_at"], int)
        assert response["completed_at"] >= response["created_at"]
    else:
        assert response["completed_at"] is None
    if finished:
        usage = response["usage"]
        assert usage is not None
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    if response["status"] == "incomplete":
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    else:
        assert response["incomplete_details"] is None
    if response["status"] == "failed":
        validate(response["error"], "Error")
    else:
        assert response["error"] is None
    text = "".join(p["text"] for i in response["output"] for p in i.get("content", []))
    assert response["output_text"] == text


def check_event(event: dict[str, Any]) -> None:
    if event["type"] in LMSP_EVENTS:
        assert set(event) == {"type", "sequence_number", "response"}, event.keys()
        assert isinstance(event["sequence_number"], int)
    else:
        validate(event, EVENT_SCHEMAS[event["type"]])
    if "response" in event:
        check_response(event["response"])


def check_stream(events: list[dict[str, Any]], *, gapless: bool = True) -> None:
    """Each event valid; one item with consistent ids; the standard order; numbering."""
    for event in events:
        check_event(event)
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers))
    if gapless:
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    items = [e for e in events if "item_id" in e or "item" in e]
    for event in events:
        if event["type"] == "response.output_item.added":
            # Announced empty: the part arrives with response.content_part.added (an SDK
            # building the item from events would otherwise hold two parts).
            assert event["item"]["content"] == [], event
    if items:
        first = items[0]
        item_id = first.get("item_id", first.get("item", {}).get("id"))
        for event in items:
            assert event.get("item_id", event.get("item", {}).get("id")) == item_id
            assert event["output_index"] == 0
            if "content_index" in event:
                assert event["content_index"] == 0
        deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        # A replay that starts mid-item holds only the tail of the text.
        whole = any(e["type"] == "response.content_part.added" for e in events)
        for event in events:
            text = None
            if event["type"] == "response.output_text.done":
                text = event["text"]
            elif event["type"] == "response.content_part.done":
                text = event["part"]["text"]
            elif event["type"] == "response.output_item.done":
                text = event["item"]["content"][0]["text"]
            elif event["type"] in ("response.completed", "response.incomplete"):
                text = event["response"]["output_text"]
                assert event["response"]["output"][0]["id"] == item_id
            if text is not None:
                assert text == deltas if whole else text.endswith(deltas)
    CHECKS["stream"] += 1


@pytest.fixture(scope="module", autouse=True)
def report_checks() -> Iterator[None]:
    yield
    print("\nOpen Responses schema checks:", dict(sorted(CHECKS.items())))


@pytest.fixture(scope="module")
def prompt_model(live: LiveCore) -> Iterator[LlamaModel]:
    """A second instance of the demo model, to compute the prompt each request must become."""
    loaded: LoadedModel = live.call(LlamaEngine().load(demo_model_path()))
    assert isinstance(loaded, LlamaModel)
    try:
        yield loaded
    finally:
        live.call(loaded.unload())


def prompt_tokens(model: LlamaModel, messages: list[dict[str, str]]) -> int:
    return len(model.tokenize_prompt(model.render_prompt(messages)))


async def create(http: aiohttp.ClientSession, client: Client, **fields: Any) -> dict[str, Any]:
    async with http.post("/v1/responses", json=body(**fields), headers=client.headers) as r:
        answer: dict[str, Any] = await r.json()
        assert r.status == 200, answer
    return answer


# -- the tests ---------------------------------------------------------------------------------
async def test_the_validator_is_not_vacuous(http: aiohttp.ClientSession, user: Client) -> None:
    """A real response with one required field dropped, or a number made null, fails."""
    response = await create(http, user)
    check_response(response)
    for key, value in (
        ("usage", ...),
        ("top_p", None),
        ("text", {"format": {}}),
        ("completed_at", ...),
        ("status", None),
    ):
        broken = copy.deepcopy(response)
        if value is ...:
            del broken[key]
        else:
            broken[key] = value
        with pytest.raises(jsonschema.ValidationError):
            validator("ResponseResource").validate(broken)
    broken = copy.deepcopy(response)
    del broken["output"][0]["content"][0]["annotations"]
    with pytest.raises(jsonschema.ValidationError):
        validator("ResponseResource").validate(broken)


async def test_plain_response_echoes_the_settings_used(
    http: aiohttp.ClientSession, user: Client
) -> None:
    response = await create(
        http,
        user,
        temperature=0.3,
        top_p=0.9,
        max_output_tokens=10,
        seed=7,
        presence_penalty=0.5,
        metadata={"purpose": "schema-test"},
        store=True,
    )
    check_response(response)
    assert (response["temperature"], response["top_p"], response["max_output_tokens"]) == (
        0.3,
        0.9,
        10,
    )
    assert response["presence_penalty"] == 0.5 and response["frequency_penalty"] == 0.0
    assert response["metadata"] == {"purpose": "schema-test"}
    assert response["background"] is False and response["store"] is True
    assert response["status"] in ("completed", "incomplete")
    assert response["usage"]["output_tokens"] <= 10
    # Left out, the sampling settings report the defaults actually used.
    default = await create(http, user, temperature=None)
    check_response(default)
    assert isinstance(default["temperature"], float) and default["temperature"] > 0
    assert isinstance(default["top_p"], float)


# At temperature 0 the demo model answers this in a few tokens and ends its turn.
COMPLETES = {"input": "What is the capital of France? One word.", "max_output_tokens": 24}


@pytest.mark.parametrize(
    ("fields", "final"),
    [(COMPLETES, "response.completed"), ({}, "response.incomplete")],
    ids=["completed", "incomplete"],
)
async def test_streamed_response_event_by_event(
    http: aiohttp.ClientSession, user: Client, fields: dict[str, Any], final: str
) -> None:
    await create(http, user)  # the model is loaded: no LMSP event skipped, so no gaps
    async with http.post(
        "/v1/responses", json=body(stream=True, **fields), headers=user.headers
    ) as r:
        assert r.status == 200
        events = [e.data for e in parse_sse(await r.read())]
    check_stream(events)
    assert STANDARD_ORDER.fullmatch(" ".join(e["type"] for e in events))
    assert events[-1]["type"] == final
    print(
        "\nevent sequence:",
        " ".join(f"{e['sequence_number']}:{e['type'].removeprefix('response.')}" for e in events),
    )
    assert events[0]["sequence_number"] == 1
    assert events[0]["response"]["status"] == "queued"
    assert events[1]["response"]["status"] == "in_progress"
    # The same events are what the log stores and what a resumed stream replays.
    assert events == await events_of(http, user.headers, events[0]["response"]["id"])


async def test_system_prompt_reaches_the_model(
    http: aiohttp.ClientSession, user: Client, prompt_model: LlamaModel
) -> None:
    question = "What should I eat for breakfast?"
    rule = "You are a pirate. Answer every question in pirate speech, starting with 'Arr!'."
    plain = await create(http, user, input=question, max_output_tokens=16)
    with_instructions = await create(
        http, user, input=question, instructions=rule, max_output_tokens=16
    )
    with_item = await create(
        http,
        user,
        max_output_tokens=16,
        input=[
            {"type": "message", "role": "system", "content": rule},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": question}],
            },
        ],
    )
    as_developer = await create(
        http,
        user,
        max_output_tokens=16,
        input=[
            {"type": "message", "role": "developer", "content": rule},
            {"role": "user", "content": question},
        ],
    )
    for response in (plain, with_instructions, with_item, as_developer):
        check_response(response)
    assert with_instructions["instructions"] == rule and plain["instructions"] is None
    expected = prompt_tokens(
        prompt_model, [{"role": "system", "content": rule}, {"role": "user", "content": question}]
    )
    # The usage counts the prompt the chat template made, system block included.
    assert with_instructions["usage"]["input_tokens"] == expected
    assert with_item["usage"]["input_tokens"] == expected
    assert as_developer["usage"]["input_tokens"] == expected
    assert plain["usage"]["input_tokens"] == prompt_tokens(
        prompt_model, [{"role": "user", "content": question}]
    )
    assert plain["usage"]["input_tokens"] != expected
    # Greedy decoding: the same prompt gives the same answer, a system prompt another one.
    assert with_instructions["output_text"] == with_item["output_text"]
    assert with_instructions["output_text"] != plain["output_text"]


async def test_multi_turn_conversation(
    http: aiohttp.ClientSession, user: Client, prompt_model: LlamaModel
) -> None:
    turns = [
        {"role": "user", "content": "My name is Ada. Remember it."},
        {"role": "assistant", "content": "Nice to meet you, Ada!"},
        {"role": "user", "content": "What is my name?"},
    ]
    items = [
        {
            "type": "message",
            "role": t["role"],
            "content": [
                {
                    "type": "output_text" if t["role"] == "assistant" else "input_text",
                    "text": t["content"],
                    **({"annotations": []} if t["role"] == "assistant" else {}),
                }
            ],
        }
        for t in turns
    ]
    response = await create(http, user, input=items, max_output_tokens=16)
    check_response(response)
    assert response["usage"]["input_tokens"] == prompt_tokens(prompt_model, turns)
    plain = await create(http, user, input=turns, max_output_tokens=16)
    assert plain["output_text"] == response["output_text"]  # both input forms are the same


async def test_background_response_retrieved_after_completion(
    http: aiohttp.ClientSession, user: Client
) -> None:
    accepted = await create_background(http, user.headers, max_output_tokens=10)
    check_response(accepted)
    assert accepted["status"] == "queued" and accepted["background"] is True
    await wait_state(http, user.headers, accepted["id"], ("completed", "incomplete"))
    async with http.get(f"/v1/responses/{accepted['id']}", headers=user.headers) as r:
        done = await r.json()
    check_response(done)
    assert done["status"] in ("completed", "incomplete") and done["background"] is True
    assert done["output"][0]["status"] == (
        "completed" if done["status"] == "completed" else "incomplete"
    )
    log = await events_of(http, user.headers, accepted["id"])
    check_stream(log)
    assert log[-1]["response"] == {**done, "task": log[-1]["response"]["task"]}


async def test_cancelled_response(http: aiohttp.ClientSession, user: Client) -> None:
    task = await create_background(http, user.headers, **LONG)
    await wait_state(http, user.headers, task["id"], ("running",))
    async with http.post(f"/v1/responses/{task['id']}/cancel", headers=user.headers) as r:
        assert r.status == 200
        answer = await r.json()
    check_response(answer)
    await wait_state(http, user.headers, task["id"], ("cancelled",))
    async with http.get(f"/v1/responses/{task['id']}", headers=user.headers) as r:
        cancelled = await r.json()
    check_response(cancelled)
    assert cancelled["status"] == "cancelled"
    assert cancelled["output"][0]["status"] == "incomplete"
    # The whole log (LMSP events included) and the Responses stream of it.
    check_stream(await events_of(http, user.headers, task["id"]))
    async with http.get(
        f"/v1/responses/{task['id']}", params={"stream": "true"}, headers=user.headers
    ) as r:
        shown = [e.data for e in parse_sse(await r.read())]
    check_stream(shown, gapless=False)
    assert shown[-1]["type"] == "error" and shown[-1]["error"]["code"] == "cancelled"


async def test_cancelled_stream_ends_with_a_valid_error_event(
    http: aiohttp.ClientSession, user: Client
) -> None:
    async with http.post(
        "/v1/responses", json=body(stream=True, **LONG), headers=user.headers
    ) as r:
        head = await read_sse_until(r, lambda e: e.event == "response.output_text.delta")
        await cancel(http, user.headers, head[0].data["response"]["id"])
        events = [e.data for e in head + parse_sse(await r.read())]
    check_stream(events, gapless=False)
    assert events[-1]["type"] == "error"


async def test_replayed_stream_via_starting_after(
    http: aiohttp.ClientSession, user: Client
) -> None:
    await create(http, user)  # the model is loaded: no LMSP event skipped, so no gaps
    done = await create(http, user)
    for after in (0, 2, 4):
        async with http.get(
            f"/v1/responses/{done['id']}",
            params={"stream": "true", "starting_after": after},
            headers=user.headers,
        ) as r:
            events = [e.data for e in parse_sse(await r.read())]
        check_stream(events)
        assert events[0]["sequence_number"] == after + 1
        assert events[-1]["type"] in ("response.completed", "response.incomplete")


async def test_echoed_fields_chains_and_input_items_stay_valid(
    http: aiohttp.ClientSession, user: Client
) -> None:
    echo = {
        "prompt_cache_key": "cache-1",
        "safety_identifier": "user-42",
        "parallel_tool_calls": False,
        "max_tool_calls": 3,
        "reasoning": {"effort": "low"},
        "include": ["message.output_text.logprobs"],
        "truncation": "auto",
    }
    first = await create(http, user, **echo)
    check_response(first)
    for key in ("prompt_cache_key", "safety_identifier", "parallel_tool_calls"):
        assert first[key] == echo[key], key
    assert first["max_tool_calls"] == 3 and first["truncation"] == "auto"
    assert first["reasoning"] == {"effort": "low", "summary": None}
    second = await create(http, user, input="And again.", previous_response_id=first["id"])
    check_response(second)
    assert second["previous_response_id"] == first["id"]
    assert isinstance(second["parallel_tool_calls"], bool)  # not sent: the value used
    async with http.get(f"/v1/responses/{second['id']}/input_items", headers=user.headers) as r:
        listed = await r.json()
    for item in listed["data"]:
        validate(item, "Message")
    # A chat completion's task logs the same Open Responses events.
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    async with http.post("/v1/chat/completions", json=chat, headers=user.headers) as r:
        completion = await r.json()
    events = await events_of(http, user.headers, completion["id"])
    check_stream([e for e in events if e["type"] not in LMSP_EVENTS], gapless=False)


async def test_failed_response(broken_live: LiveCore) -> None:
    """A model file that llama.cpp cannot load fails its task cleanly: response.failed,
    valid. (An over-long input no longer fails a task: it is refused before one exists.)"""
    headers = auth(broken_live.token("responses:read", "responses:write"))
    async with (
        aiohttp.ClientSession(base_url=broken_live.url) as http,
        http.post(
            "/v1/responses",
            json={"model": BROKEN, "input": "Hi", "stream": True},
            headers=headers,
        ) as r,
    ):
        events = [e.data for e in parse_sse(await r.read())]
    check_stream(events, gapless=False)  # response.loading (LMSP's own) is left out
    assert events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "model_load_failed"
    assert "broken.gguf" in failed["error"]["message"]


def test_streams_of_retried_and_resumed_responses_stay_valid(tmp_path: Path) -> None:
    """Across restarts: a `retry` task gets response.queued and a new output item, a `resume`
    task continues its item (response.resumed is LMSP's own, left out of Responses streams)."""
    data_dir = tmp_path / "restarts"
    policies = {"retry": "", "resume": ""}

    def run(core: LiveCore, scenario: Any) -> Any:
        async def go() -> Any:
            async with aiohttp.ClientSession(base_url=core.url) as http:
                return await scenario(http)

        return asyncio.run(go())

    first = LiveCore(data_dir)
    token = first.token("admin", name="restarts-admin")
    admin = Client("owner", token)

    async def start(http: aiohttp.ClientSession) -> None:
        for policy in policies:
            task = await create_background(
                http,
                admin.headers,
                max_output_tokens=30,
                on_restart=policy,
                input="Write a short poem about the sea.",
            )
            policies[policy] = task["id"]
        await wait_tokens(http, policies["retry"])

    async def wait_tokens(http: aiohttp.ClientSession, task_id: str) -> None:
        task = await wait_state(http, admin.headers, task_id, ("running",))
        while task["output_tokens"] < 3:
            await asyncio.sleep(0.02)
            async with http.get(f"/v1/tasks/{task_id}", headers=admin.headers) as r:
                task = await r.json()
            assert task["state"] == "running", task

    run(first, start)
    first.stop()  # retry task running, resume task queued
    second = LiveCore(data_dir)
    run(second, lambda http: wait_tokens(http, policies["resume"]))
    second.stop()  # retry task (maybe finished), resume task running
    third = LiveCore(data_dir)

    async def check(http: aiohttp.ClientSession) -> None:
        for task_id in policies.values():
            await wait_state(http, admin.headers, task_id, ("completed", "incomplete"))
        retried = await events_of(http, admin.headers, policies["retry"])
        resumed = await events_of(http, admin.headers, policies["resume"])
        assert "response.queued" in [e["type"] for e in retried]
        assert "response.resumed" in [e["type"] for e in resumed]
        for log in (retried, resumed):
            for event in log:
                check_event(event)
        # The resumed task's Responses stream: one item, continued without a repeat.
        async with http.get(
            f"/v1/responses/{policies['resume']}",
            params={"stream": "true"},
            headers=admin.headers,
        ) as r:
            shown = [e.data for e in parse_sse(await r.read())]
        assert "response.resumed" not in [e["type"] for e in shown]
        check_stream(shown, gapless=False)
        # The retried task's stream: after response.queued a new item that is the answer.
        async with http.get(
            f"/v1/responses/{policies['retry']}",
            params={"stream": "true"},
            headers=admin.headers,
        ) as r:
            shown = [e.data for e in parse_sse(await r.read())]
        requeue = max(i for i, e in enumerate(shown) if e["type"] == "response.queued")
        assert shown[requeue]["response"]["output"] == []
        check_event(shown[requeue])
        check_stream(shown[requeue + 1 :])
        first_item = next(e for e in shown if e["type"] == "response.output_item.added")
        final = shown[-1]["response"]
        assert [i["id"] for i in final["output"]] != [first_item["item"]["id"]]

    try:
        run(third, check)
    finally:
        third.stop()


# -- function tools and structured output (issue 14) ------------------------------------------
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "strict": True,
}
CALL_ORDER = re.compile(
    r"response\.created response\.in_progress response\.output_item\.added "
    r"(response\.function_call_arguments\.delta )+response\.function_call_arguments\.done "
    r"response\.output_item\.done response\.completed"
)


async def test_function_call_streams_and_validates(
    http: aiohttp.ClientSession, user: Client
) -> None:
    await create(http, user)  # the model is loaded: no LMSP event skipped, so no gaps
    fields = {
        "input": "What is the weather in Paris?",
        "tools": [WEATHER_TOOL, {"type": "web_search"}],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_output_tokens": 80,
        "stream": True,
    }
    async with http.post("/v1/responses", json=body(**fields), headers=user.headers) as r:
        assert r.status == 200
        events = [e.data for e in parse_sse(await r.read())]
    for event in events:
        check_event(event)
    types = " ".join(e["type"] for e in events)
    assert CALL_ORDER.fullmatch(types), types
    added, done = events[2]["item"], events[-2]["item"]
    assert added["type"] == "function_call" and added["status"] == "in_progress"
    assert added["arguments"] == "" and added["name"] == "get_weather"
    deltas = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert done["arguments"] == deltas == events[-3]["arguments"]
    assert done["status"] == "completed" and done["call_id"] == added["call_id"]
    assert all(e.get("item_id", added["id"]) == added["id"] for e in events)
    arguments = json.loads(done["arguments"])
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("c", "f")
    response = events[-1]["response"]
    assert response["output"] == [done] and response["output_text"] == ""
    assert response["tools"] == [WEATHER_TOOL] and response["tool_choice"] == "required"
    assert response["parallel_tool_calls"] is False
    assert response["task"]["dropped_tools"] == ["web_search"]
    assert events == await events_of(http, user.headers, response["id"])


async def test_tool_round_trip_with_output_items(http: aiohttp.ClientSession, user: Client) -> None:
    first = await create(
        http,
        user,
        input="What is the weather in Paris?",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=80,
    )
    check_response(first)
    call = first["output"][0]
    answer = await create(
        http,
        user,
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "22 C, sunny"},
        ],
        tools=[WEATHER_TOOL],
        tool_choice="none",
        max_output_tokens=40,
    )
    check_response(answer)
    assert answer["output"][0]["type"] == "message" and answer["output_text"]
    assert answer["tool_choice"] == "none"


async def test_structured_output_parses_and_validates(
    http: aiohttp.ClientSession, user: Client
) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "name": "trip", "schema": schema, "strict": True}
    response = await create(
        http,
        user,
        input="Plan a three-day trip to Rome.",
        text={"format": fmt},
        max_output_tokens=60,
    )
    check_response(response, "json_schema")
    data = json.loads(response["output_text"])
    jsonschema.validate(data, schema)
    async with http.post(
        "/v1/responses",
        json=body(text={"format": {**fmt, "schema": {"type": "array", "uniqueItems": True}}}),
        headers=user.headers,
    ) as r:
        # A keyword the grammar cannot enforce, in a strict schema (minimum is enforced now).
        error = (await r.json())["error"]
        assert r.status == 400 and error["param"] == "text.format.schema.uniqueItems"
