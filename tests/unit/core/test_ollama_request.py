"""Ollama's chat and generate bodies into the task request: options, format, tools and tool
turns, keep_alive, and 400s that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.api.ollama.request import (
    LoadRequest,
    keep_alive_seconds,
    parse_ollama_chat,
    parse_ollama_generate,
)
from lmsp_desktop.core.errors import LmspError

MODEL = "smollm2-135m-instruct"


def chat(**body: Any) -> dict[str, Any]:
    return parse_ollama_chat({"model": MODEL, **body}, "fail")


def error(parse: Any, body: dict[str, Any]) -> LmspError:
    with pytest.raises(LmspError) as info:
        parse({"model": MODEL, **body}, "fail")
    assert info.value.status == 400
    return info.value


def test_options_become_the_shared_settings() -> None:
    request = chat(
        messages=[{"role": "user", "content": "Hi"}],
        options={"num_predict": 7, "temperature": 0, "top_p": 0.5, "seed": 3, "stop": ["x"],
                 "top_k": 20, "num_thread": 4},
    )  # fmt: skip
    assert request["stream"] is True  # Ollama streams unless told not to
    assert (request["max_output_tokens"], request["temperature"], request["top_p"]) == (7, 0, 0.5)
    assert (request["seed"], request["stop"], request["top_k"]) == (3, ["x"], 20)
    assert request["api"] == "ollama" and request["via"] == "Ollama (POST /api/chat)"
    assert "`options.num_thread` is not used by this service." in request["notes"]
    assert (
        chat(messages=[{"role": "user", "content": "Hi"}], options={"num_predict": -1})[
            "max_output_tokens"
        ]
        is None
    )


def test_generate_puts_system_and_prompt_through_the_template() -> None:
    request = parse_ollama_generate(
        {"model": MODEL, "prompt": "Hi", "system": "Be brief.", "stream": False}, "fail"
    )
    assert request["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert request["stream"] is False and request["ollama"]["endpoint"] == "generate"
    for field in ("raw", "template", "suffix", "images"):
        assert error(parse_ollama_generate, {"prompt": "Hi", field: "x"}).param == field


def test_format_json_and_schema() -> None:
    asked = [{"role": "user", "content": "Hi"}]
    assert chat(messages=asked, format="json")["text_format"] == {"type": "json_object"}
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}
    shaped = chat(messages=asked, format=schema)
    assert shaped["text_format"]["schema"] == schema and shaped["text_format"]["strict"] is False
    assert shaped["schema_notes"] == ["format.properties.n.multipleOf"]
    assert error(parse_ollama_chat, {"messages": asked, "format": "xml"}).param == "format"


def test_tool_turns_get_call_ids_matched_by_tool_name() -> None:
    request = chat(
        messages=[
            {"role": "user", "content": "Weather and time in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "weather", "arguments": {"city": "Paris"}}},
                    {"function": {"name": "time", "arguments": {"city": "Paris"}}},
                ],
            },
            {"role": "tool", "tool_name": "time", "content": "noon"},
            {"role": "tool", "tool_name": "weather", "content": "sunny"},
        ],
        tools=[{"type": "function", "function": {"name": "weather", "parameters": {}}}],
    )
    calls = request["messages"][1]["tool_calls"]
    assert [c["name"] for c in calls] == ["weather", "time"]
    assert calls[0]["arguments"] == '{"city": "Paris"}'
    assert request["messages"][2] == {
        "role": "tool",
        "call_id": calls[1]["call_id"],
        "content": "noon",
    }
    assert request["messages"][3]["call_id"] == calls[0]["call_id"]
    assert request["tools"][0]["name"] == "weather" and request["tool_choice"] == "auto"


def test_bad_fields_are_named() -> None:
    asked = [{"role": "user", "content": "Hi"}]
    assert error(
        parse_ollama_chat, {"messages": asked, "options": {"temperature": "hot"}}
    ).param == ("options.temperature")
    assert error(parse_ollama_chat, {"messages": []}).param == "messages"
    assert error(parse_ollama_chat, {"messages": [{"role": "bot", "content": "x"}]}).param == (
        "messages[0].role"
    )
    images = [{"role": "user", "content": "What is this?", "images": ["aGk="]}]
    assert error(parse_ollama_chat, {"messages": images}).param == "messages[0].images"
    assert error(parse_ollama_chat, {"messages": asked, "keep_alive": "soon"}).param == "keep_alive"


def test_think_is_refused_as_ollama_refuses_a_model_that_cannot_think() -> None:
    asked = [{"role": "user", "content": "Hi"}]
    refused = error(parse_ollama_chat, {"messages": asked, "think": True})
    assert refused.param == "think"
    assert refused.message.startswith(f'"{MODEL}" does not support thinking')
    assert error(parse_ollama_generate, {"prompt": "Hi", "think": "low"}).param == "think"
    # A load asking for thinking too (as in Ollama); an unload does not look.
    assert error(parse_ollama_chat, {"messages": [], "think": True}).param == "think"
    with pytest.raises(LoadRequest) as unload:
        parse_ollama_chat({"model": MODEL, "think": True, "keep_alive": 0}, "fail")
    assert unload.value.unloads
    assert error(parse_ollama_chat, {"messages": asked, "think": 1}).message.startswith(
        "`think` must be"
    )
    assert chat(messages=asked, think=False)["messages"] == asked


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, None), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25), (0, 0.0), ("-1", -1.0),
     (-1, -1.0), ("10", 10.0)],
)  # fmt: skip
def test_keep_alive_durations(value: Any, seconds: float | None) -> None:
    assert keep_alive_seconds(value) == seconds
