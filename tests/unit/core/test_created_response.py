"""A create's 202 body is built straight from what the create knows (resource.created_response,
B1), not read back from a row: it must be the very object the generic path builds from the
stored row, key for key, in the same order, for every API's requests and every kind a create
makes. The stored `response.created` and each background 202 are this object's JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lmsp_desktop.core.api.anthropic.request import parse_messages_request
from lmsp_desktop.core.api.chat.request import parse_chat
from lmsp_desktop.core.api.completions.request import parse_completion
from lmsp_desktop.core.api.embeddings.request import parse_embeddings
from lmsp_desktop.core.api.ollama.request import parse_ollama_chat, parse_ollama_generate
from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.states import RestartPolicy, TaskKind
from lmsp_desktop.core.storage.creates import created_row, prepared
from lmsp_desktop.core.storage.events import to_json
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask

TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}

REQUESTS: dict[str, dict[str, Any]] = {
    "responses, least": parse_create({"model": "m", "input": "hi"}, "fail"),
    "responses, background": parse_create(
        {"model": "m", "input": "hi", "background": True, "max_output_tokens": 16}, "retry"
    ),
    "responses, everything": parse_create(
        {
            "model": "m",
            "input": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": "get_weather",
                    "arguments": "{}",
                },
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ],
            "instructions": "You are terse.",
            "tools": [TOOL, {"type": "web_search"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [TOOL]},
            "parallel_tool_calls": True,
            "max_tool_calls": 3,
            "text": {"format": {"type": "json_schema", "name": "out", "schema": SCHEMA}},
            "reasoning": {"effort": "low"},
            "metadata": {"k": "v"},
            "include": ["message.output_text.logprobs"],
            "store": False,
            "stream": True,
            "temperature": 0.2,
            "top_p": 0.5,
            "presence_penalty": 1.0,
            "frequency_penalty": -1.0,
            "seed": 7,
            "truncation": "auto",
            "user": "u",
            "prompt_cache_key": "p",
            "safety_identifier": "s",
            "previous_response_id": "resp_earlier",
            "on_restart": "resume",
        },
        "fail",
    ),
    "chat completions": parse_chat(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "response_format": {"type": "json_object"},
            "stop": ["\n"],
            "stream": True,
        },
        "fail",
    ),
    "anthropic messages": parse_messages_request(
        {
            "model": "m",
            "max_tokens": 8,
            "system": "s",
            "messages": [{"role": "user", "content": "hi"}],
        },
        "fail",
    ),
    "completions": parse_completion({"model": "m", "prompt": "Once", "suffix": "end"}, "fail"),
    "ollama chat": parse_ollama_chat(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "keep_alive": "5m"}, "fail"
    ),
    "ollama generate": parse_ollama_generate(
        {"model": "m", "prompt": "hi", "stream": False}, "fail"
    ),
    # What older callers and tests store: a request with few of the keys.
    "sparse": {"input": "hi", "temperature": 0.0, "top_p": 1.0, "background": True},
}
KINDS = {
    "response": (TaskKind.RESPONSE, None),
    "embedding": (
        TaskKind.EMBEDDING,
        parse_embeddings({"model": "m", "input": ["a", "b"]}, "fail"),
    ),
}


def specs() -> list[tuple[str, NewTask]]:
    made = []
    for name, request in REQUESTS.items():
        for mode in ("background", "stream", "sync"):
            made.append(
                (
                    f"{name}, {mode}",
                    NewTask(
                        model="m:q4",
                        request=request,
                        on_restart=RestartPolicy(request.get("on_restart", "fail")),
                        mode=mode,
                        client_id="client_1" if mode == "sync" else None,
                    ),
                )
            )
    for name, (kind, request) in KINDS.items():
        made.append((name, NewTask(model="m", request=request or REQUESTS["sparse"], kind=kind)))
    return made


def ordered(value: Any) -> Any:
    """The value with every dict as its list of items: equal only in the same key order."""
    if isinstance(value, dict):
        return [(key, ordered(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [ordered(item) for item in value]
    return value


@pytest.mark.parametrize(("name", "spec"), specs(), ids=[name for name, _ in specs()])
def test_the_created_body_is_the_generic_one_in_the_same_order(name: str, spec: NewTask) -> None:
    create = prepared(spec, None)
    row = created_row(spec, create.now, create.request_json)
    generic = build_response(row, None, spec.request)
    assert ordered(create.body) == ordered(generic)
    assert to_json(create.body) == to_json(generic)  # the 202's bytes and the stored event's
    # The request decoded from the stored JSON gives it too (what a later read would).
    assert ordered(build_response(row)) == ordered(create.body)


async def test_the_202_body_is_what_the_stored_row_says(store: Store) -> None:
    """Committed through the store: the body it answered is build_response of the row it
    wrote (queue position aside, which the writer counts), and the stored
    `response.created` event carries the same JSON text."""
    for _, spec in specs():
        result = await store.tasks.create(spec)
        row = await store.tasks.get(result.task_id)
        stored = build_response(row, result.body["task"]["queue_position"])
        assert ordered(result.body) == ordered(stored)
        events = await store.tasks.events(result.task_id)
        assert events[0]["type"] == "response.created"
        assert json.loads(result.body_json or "") == events[0]["response"]
        assert ordered(events[0]["response"]) == ordered(json.loads(to_json(stored)))
