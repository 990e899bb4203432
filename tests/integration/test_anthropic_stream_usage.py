"""The Anthropic stream's `message_start` carries the prompt's token count (known when the
request is admitted), as Anthropic's does: LangChain's streaming usage reads it there. With the
anthropic SDK against the real service and demo model."""

from __future__ import annotations

import anthropic

from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]


def test_message_start_says_the_input_tokens(live: LiveCore) -> None:
    client = anthropic.Anthropic(
        base_url=live.url, api_key=live.token(*USER_SCOPES), max_retries=0, timeout=300
    )
    try:
        with client.messages.stream(
            model=MODEL,
            max_tokens=8,
            system="Answer briefly.",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            extra_body={"temperature": 0},
        ) as stream:
            events = list(stream)
            final = stream.get_final_message()
    finally:
        client.close()
    start = events[0]
    assert start.type == "message_start"
    started = start.message.usage
    # The count the engine read (message_delta's, split by the prefix cache) is the same.
    read = final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert read > 10
    assert started.input_tokens == read  # it was 0, the count only in message_delta
    assert started.output_tokens == 0 and not started.cache_read_input_tokens
