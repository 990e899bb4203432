"""The mistakes a new user makes with the real `openai` and `anthropic` SDKs, against the real
service: a base URL with `/v1` missing or doubled, a key that is not a token. The SDK raises
with the service's message, which says what to change."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

HELLO = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def token(live: LiveCore) -> str:
    return live.token(*USER_SCOPES)


@pytest.fixture
def openai_at_root(live: LiveCore, token: str) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=live.url, api_key=token, max_retries=0, timeout=60)
    try:
        yield client
    finally:
        client.close()


def test_openai_sdk_without_v1_is_told_to_add_it(
    live: LiveCore, openai_at_root: openai.OpenAI
) -> None:
    fix = f"take a base URL ending in /v1: {live.url}/v1."
    with pytest.raises(openai.NotFoundError) as info:
        openai_at_root.responses.create(model=MODEL, input="Hi", max_output_tokens=4)
    assert "There is no route POST /responses: " in info.value.message
    assert fix in info.value.message
    with pytest.raises(openai.NotFoundError) as info:
        openai_at_root.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=4)  # type: ignore[arg-type]
    assert fix in info.value.message
    with pytest.raises(openai.NotFoundError) as info:
        openai_at_root.models.list()
    assert "There is no route GET /models: " in info.value.message and fix in info.value.message


def test_anthropic_sdk_with_v1_is_told_to_give_the_root(live: LiveCore, token: str) -> None:
    client = anthropic.Anthropic(base_url=live.url + "/v1", api_key=token, max_retries=0)
    with client, pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model=MODEL, max_tokens=4, messages=HELLO)  # type: ignore[arg-type]
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error"  # Anthropic's shape
    assert body["error"]["type"] == "not_found_error"
    message = body["error"]["message"]
    assert message.startswith("There is no route POST /v1/v1/messages: ")
    assert f"the service root, {live.url}, without /v1." in message


@pytest.mark.parametrize(
    ("sent", "named"),
    [
        # As Claude Code's ANTHROPIC_API_KEY and earlier anthropic SDKs send a key.
        ({"default_headers": {"x-api-key": "nope"}}, "The x-api-key header is not an `lmsp_…`"),
        # As this SDK (2.16) sends `api_key`: `Authorization: Bearer nope`.
        ({"api_key": "nope"}, "The Authorization header is not `Bearer lmsp_…`"),
    ],
)
def test_anthropic_sdk_with_a_key_that_is_no_token_is_told_which_header(
    live: LiveCore, monkeypatch: pytest.MonkeyPatch, sent: dict[str, Any], named: str
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)  # only the key given here is sent
    client = anthropic.Anthropic(base_url=live.url, max_retries=0, **sent)
    with client, pytest.raises(anthropic.AuthenticationError) as info:
        client.messages.create(model=MODEL, max_tokens=4, messages=HELLO)  # type: ignore[arg-type]
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error"  # Anthropic's shape
    message = body["error"]["message"]
    assert message.startswith(named)
    assert "token from this service. Pair this client" in message  # the advice, as before
    assert "nope" not in str(info.value)  # the key is never repeated
