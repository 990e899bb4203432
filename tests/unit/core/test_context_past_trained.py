"""A too-long input's 400 when no context setting can help: the input is longer than the
context the model was trained for (Claude Code's ~20k tokens of tools sent to the demo model,
trained for 8,192). The advice is a shorter input or another model, never a `--context` the
model cannot take; a request with tools says what the tools alone take, and on Anthropic's
API how Claude Code sends none. Counted with the demo model's real tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.api.anthropic import INTAKE
from lmsp_desktop.core.context_window import TokenCounter, admit, context_exceeded
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.demo import demo_model_path


class DemoFile:
    """The demo model's file as the registry lists it (trained for 8,192 tokens)."""

    id = "smollm2-135m-instruct"
    source = "folder"
    chat_template = None
    context_length = 8192

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mtime_ns = path.stat().st_mtime_ns


class Plan:
    """The plan of a model set to `models set … --context 4096` (the walk's)."""

    context_length = 4096
    own_context = 4096
    cap_origin = None


def tool(i: int) -> dict[str, Any]:
    words = " ".join(f"step{i}_{j} does one thing to the file it is given" for j in range(60))
    return {
        "name": f"tool_{i}",
        "description": words,
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }


async def refusal(body: dict[str, Any]) -> str:
    path = demo_model_path()
    assert path is not None
    request = INTAKE.parse(body, "fail")
    counter = TokenCounter()
    try:
        with pytest.raises(LmspError) as caught:
            await admit(counter, DemoFile(path), request, 0, Plan(), param="messages")
    finally:
        counter.close()
    assert caught.value.code == "context_length_exceeded" and caught.value.status == 400
    return caught.value.message


async def test_tools_past_the_trained_context_advise_no_larger_context() -> None:
    """`claude -p … --model smollm2-135m-instruct` without `--tools ""`, the model set to
    4,096: a larger --context cannot help (8,192 < the input)."""
    body = {
        "model": "smollm2-135m-instruct",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "say hi"}],
        "tools": [tool(i) for i in range(20)],
    }
    message = await refusal(body)
    assert "models set" not in message and "--context" not in message, message
    assert "it is longer than the 8192 tokens the model was trained for" in message, message
    assert "use a model trained for more" in message, message
    tools = int(message.split("Its tools alone are ")[1].split(" ")[0])
    total = int(message.split("the input is ")[1].split(" ")[0])
    assert total > 8192 and total - 100 < tools < total, message  # "say hi" is a few tokens
    assert 'Claude Code sends none with `--tools ""`' in message, message


async def test_without_tools_past_the_trained_context_says_no_tools() -> None:
    body = {
        "model": "smollm2-135m-instruct",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "tea and biscuits " * 4000}],
    }
    message = await refusal(body)
    assert "use a model trained for more" in message, message
    assert "--context" not in message and "tools" not in message, message


class Trained:
    id = "qwen2.5-7b-instruct"
    context_length = 131072


def test_an_input_the_trained_context_holds_still_gets_the_setting() -> None:
    """Within what the model was trained for, a larger context is still the advice."""
    message = context_exceeded(20063, 8192, False, "messages", Trained(), 0, 8192).message
    assert "models set qwen2.5-7b-instruct --context 32768" in message, message
    assert "trained for more" not in message, message
    message = context_exceeded(20063, 8192, False, "messages", Trained(), tools=18000).message
    assert 'Its tools alone are 18000 tokens (Claude Code sends none with `--tools ""`)' in message
    message = context_exceeded(20063, 8192, False, "input", Trained(), tools=18000).message
    assert "Its tools alone are 18000 tokens." in message and "Claude" not in message, message
