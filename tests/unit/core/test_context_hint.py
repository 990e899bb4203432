"""A prompt too long for the context the model runs with, when the model was trained for
more: the error says how to give it more (agents' first prompts are 8-20k tokens, and the
service runs a 128k-declared model with less to spare memory)."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.context_window import TokenCounter
from lmsp_desktop.core.errors import LmspError


class CharVocab:
    def count(self, messages: list[dict[str, Any]], tools: Any = None) -> int:
        return sum(len(m["content"]) for m in messages)


class Model:
    path = "m.gguf"
    mtime_ns = 1
    chat_template = None
    id = "qwen2.5-7b-instruct"

    def __init__(self, trained: int) -> None:
        self.context_length = trained


def refusal(
    trained: int,
    limit: int,
    can_truncate: bool = True,
    truncation: str = "disabled",
    older: bool = False,
) -> str:
    """The 400 of a 300-token input: one message, or (`older`) a last turn after an older one."""
    counter = TokenCounter()
    counter._vocabs[("m.gguf", 1)] = CharVocab()  # type: ignore[assignment]
    earlier = [{"role": "user", "content": "x" * 100}, {"role": "assistant", "content": "y" * 100}]
    last = [{"role": "user", "content": "x" * (100 if older else 300)}]
    request = {
        "api": "responses",
        "messages": (earlier if older else []) + last,
        "truncation": truncation,
    }
    with pytest.raises(LmspError) as caught:
        counter.fit_sync(Model(trained), request, limit, can_truncate=can_truncate)
    assert caught.value.code == "context_length_exceeded"
    return caught.value.message


def test_a_model_trained_for_more_names_the_command_that_gives_it_more() -> None:
    message = refusal(trained=131072, limit=256)
    assert "300 tokens" in message and "maximum context length is 256 tokens" in message
    assert "trained for 131072 tokens" in message
    # The next power of two above the prompt: a context that takes it.
    assert "`lmsp-desktop models set qwen2.5-7b-instruct --context 512`" in message


def test_a_model_at_its_trained_context_is_not_offered_more() -> None:
    message = refusal(trained=256, limit=256, older=True)
    assert "models set" not in message and "truncation" in message


def test_truncation_is_suggested_only_where_the_api_takes_it() -> None:
    """Anthropic's, Ollama's and Chat Completions' clients cannot send `truncation`: told to,
    Claude Code's user sent it and got the same 400 back."""
    message = refusal(trained=256, limit=256, can_truncate=False)
    assert "truncation" not in message
    assert message.endswith("but the input is 300 tokens long; shorten the input.")
    assert "truncation" in refusal(trained=256, limit=256, can_truncate=True, older=True)
    # With no older turn to drop, truncation cannot help: not offered either.
    alone = refusal(trained=256, limit=256, can_truncate=True)
    assert alone.endswith("but the input is 300 tokens long; shorten the input."), alone


def test_still_too_long_after_truncation_says_what_is_left_to_shorten() -> None:
    message = refusal(trained=256, limit=256, truncation="auto")
    assert message == (
        "This model's maximum context length is 256 tokens (input and output together), but "
        "the input is 300 tokens long, even with only the system messages and the last turn "
        "left (truncation auto dropped the older turns); shorten those."
    )
