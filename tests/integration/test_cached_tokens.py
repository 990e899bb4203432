"""Usage's cached_tokens says what the prefix cache saved: a conversation's later turns
report, through the official `openai` SDK, exactly the prompt tokens the engine took from
its cache (what /v1/metrics' tokens-reused counter grew by), in both APIs, streamed or not.

A fresh service (its own Core and model, not the session's) so the first turn meets an
empty cache and reports 0.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from openai.types.responses import ResponseCompletedEvent, ResponseIncompleteEvent

from tests.integration.service_fixtures import (
    ALL_SCOPES,
    MODEL,
    USER_SCOPES,
    LiveCore,
)

SHORT: dict[str, Any] = {"max_output_tokens": 12, "temperature": 0}
SYSTEM = {"role": "system", "content": "You answer briefly and kindly. " * 20}
REUSED = "lmsp_prefix_cache_tokens_reused_total"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("cached-tokens"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def sdk(fresh: LiveCore) -> Iterator[OpenAI]:
    client = OpenAI(
        base_url=fresh.url + "/v1", api_key=fresh.token(*USER_SCOPES), max_retries=0, timeout=180
    )
    try:
        yield client
    finally:
        client.close()


class Reused:
    """The tokens-reused counter of /v1/metrics, read as how much it grew since last read."""

    def __init__(self, live: LiveCore) -> None:
        self.url = live.url + "/v1/metrics"
        self.headers = {"Authorization": f"Bearer {live.token(*ALL_SCOPES)}"}
        self.last = self._read()

    def _read(self) -> int:
        request = urllib.request.Request(self.url, headers=self.headers)
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read().decode()
        values = [line.split() for line in text.splitlines() if line.startswith(REUSED + " ")]
        assert len(values) == 1, text
        return int(float(values[0][1]))

    def grew(self) -> int:
        now = self._read()
        grown, self.last = now - self.last, now
        return grown


def test_cached_tokens_are_the_prompt_tokens_the_cache_gave(fresh: LiveCore, sdk: OpenAI) -> None:
    reused = Reused(fresh)
    conversation: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "Name a fruit."}]

    # Turn 1 on a fresh model: nothing cached, nothing reused.
    first = sdk.responses.create(model=MODEL, input=conversation, **SHORT)  # type: ignore[arg-type]
    assert first.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == 0
    assert reused.grew() == 0

    # Turn 2, streamed: response.completed carries the reuse, and so does the stored answer.
    conversation += [
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And a colour?"},
    ]
    with sdk.responses.create(
        model=MODEL,
        input=conversation,  # type: ignore[arg-type]
        stream=True,
        **SHORT,
    ) as stream:
        final = list(stream)[-1]
    assert isinstance(final, ResponseCompletedEvent | ResponseIncompleteEvent)
    usage = final.response.usage
    assert usage is not None
    cached = usage.input_tokens_details.cached_tokens
    assert cached == reused.grew()
    # The system prompt and the first turn came from the cache, the new question did not.
    assert first.usage.input_tokens <= cached < usage.input_tokens
    stored = sdk.responses.retrieve(final.response.id)
    assert stored.usage is not None and stored.usage.input_tokens_details.cached_tokens == cached

    # Turn 3 through Chat Completions: the same figure as prompt_tokens_details.
    conversation += [
        {"role": "assistant", "content": final.response.output_text},
        {"role": "user", "content": "And an animal?"},
    ]
    completion = sdk.chat.completions.create(model=MODEL, messages=conversation, **_chat())  # type: ignore[arg-type]
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    cached = completion.usage.prompt_tokens_details.cached_tokens or 0
    assert cached == reused.grew() and cached >= usage.input_tokens

    # Turn 4, streamed with include_usage: the final usage chunk says it.
    conversation += [
        {"role": "assistant", "content": completion.choices[0].message.content or ""},
        {"role": "user", "content": "And a tree?"},
    ]
    chunks = list(
        sdk.chat.completions.create(
            model=MODEL,
            messages=conversation,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
            **_chat(),
        )
    )
    last = chunks[-1].usage
    assert last is not None and last.prompt_tokens_details is not None
    cached = last.prompt_tokens_details.cached_tokens or 0
    assert cached == reused.grew() and cached >= completion.usage.prompt_tokens


def _chat() -> dict[str, Any]:
    return {"max_tokens": 12, "temperature": 0}
