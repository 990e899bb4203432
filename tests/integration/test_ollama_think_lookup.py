"""`think` on Ollama's `/api/chat` and `/api/generate` naming a model the service lacks: Ollama
looks the model up first and answers 404 `model not found`; this service answered 400 "does
not support thinking", so a client that asks again without `think` on that 400 got the 404
only on its second try. The official `ollama` client against the real service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ollama import Client, ResponseError

from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

UNKNOWN = "no-such-thinker"
ASKED = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def ollama(live: LiveCore) -> Iterator[Client]:
    token = live.token(*USER_SCOPES)
    client = Client(host=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
    yield client
    client._client.close()


def refused(call: object) -> ResponseError:
    assert callable(call)
    with pytest.raises(ResponseError) as error:
        call()
    return error.value


def test_an_unknown_model_asked_to_think_answers_404_before_the_think_check(
    ollama: Client,
) -> None:
    for error in (
        refused(lambda: ollama.chat(UNKNOWN, ASKED, think=True)),
        refused(lambda: ollama.generate(UNKNOWN, "Hi", think="high")),
        refused(lambda: ollama.chat(UNKNOWN, [], think=True)),  # a load (no messages)
        refused(lambda: ollama.generate(UNKNOWN, think=True)),  # a load (no prompt)
    ):
        assert error.status_code == 404, error
        assert UNKNOWN in error.error and "GET /api/tags" in error.error, error.error
        assert "thinking" not in error.error
    # A model the service has: still Ollama's 400 for a model that cannot think, the load too.
    for error in (
        refused(lambda: ollama.chat(MODEL, ASKED, think=True)),
        refused(lambda: ollama.chat(MODEL, [], think=True)),
        refused(lambda: ollama.generate(f"{MODEL}:latest", "Hi", think="low")),
    ):
        assert error.status_code == 400, error
        assert error.error.startswith('"') and "does not support thinking" in error.error
