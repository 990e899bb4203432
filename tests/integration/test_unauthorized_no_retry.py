"""Every 401 says `x-should-retry: false`: a missing, malformed, unknown or revoked token fails
the same way on every try, and Claude Code retried such a 401 eleven times over 3 minutes,
silent, unless told not to (with the header it failed at once). The real `anthropic` and
`openai` SDKs, told to retry twice, send one request and surface the 401."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import anthropic
import httpx2
import openai
import pytest

from tests.integration.service_fixtures import MODEL, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

# One route of each API, each answering errors in its own shape.
ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/responses", {"model": MODEL, "input": "Hi"}),
    ("POST", "/v1/messages", {"model": MODEL, "max_tokens": 4, "messages": []}),
    ("POST", "/v1/chat/completions", {"model": MODEL, "messages": []}),
    ("GET", "/v1/models", None),
    ("GET", "/v1/tasks", None),
    ("GET", "/api/tags", None),
]
CALLERS = ["no token", "not a token", "x-api-key not a token", "unknown token", "revoked"]


def headers_of(live: LiveCore, caller: str) -> dict[str, str]:
    return {
        "no token": {},
        "not a token": {"Authorization": "Bearer sk-not-ours"},
        "x-api-key not a token": {"x-api-key": "sk-ant-not-ours"},
        "unknown token": {"Authorization": "Bearer lmsp_" + "x" * 43},
        "revoked": {"Authorization": f"Bearer {live.revoked_token()}"},
    }[caller]


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize(("method", "path", "payload"), ROUTES, ids=[r[1] for r in ROUTES])
async def test_every_401_says_not_to_retry(
    live: LiveCore, caller: str, method: str, path: str, payload: Any
) -> None:
    async with (
        aiohttp.ClientSession(base_url=live.url) as http,
        http.request(method, path, json=payload, headers=headers_of(live, caller)) as r,
    ):
        said = await r.json()
        assert r.status == 401, said
        assert r.headers["x-should-retry"] == "false"
    text = str(said)
    assert "token" in text and "Pair" in text  # the error in the route's shape, as before
    if path == "/v1/messages":
        assert said["type"] == "error" and said["error"]["type"] == "authentication_error"
    elif path.startswith("/api/"):
        assert set(said) == {"error"} and isinstance(said["error"], str)  # Ollama's shape
    else:
        assert said["error"]["code"] in ("missing_token", "invalid_token")


def test_an_authorized_answer_has_no_such_header(live: LiveCore) -> None:
    import urllib.request

    request = urllib.request.Request(
        f"{live.url}/v1/models", headers={"Authorization": f"Bearer {live.token('models:read')}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200 and "x-should-retry" not in answer.headers


class Counted:
    """An httpx2 client for an SDK that counts the requests the SDK sends."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.client = httpx2.Client(event_hooks={"request": [self._sent]})

    def _sent(self, request: httpx2.Request) -> None:
        self.sent.append(f"{request.method} {request.url.path}")


@pytest.fixture
def counted() -> Iterator[Counted]:
    made = Counted()
    try:
        yield made
    finally:
        made.client.close()


def test_anthropic_sdk_sends_one_request_with_a_revoked_token(
    live: LiveCore, counted: Counted
) -> None:
    # The base URL is the service root, as Claude Code's ANTHROPIC_BASE_URL.
    sdk = anthropic.Anthropic(
        base_url=live.url,
        api_key=live.revoked_token(),
        max_retries=2,
        http_client=counted.client,
    )
    with pytest.raises(anthropic.AuthenticationError) as refused:
        sdk.messages.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    assert refused.value.status_code == 401
    assert "revoked" in str(refused.value)
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert counted.sent == ["POST /v1/messages"]


def test_openai_sdk_sends_one_request_with_an_unknown_token(
    live: LiveCore, counted: Counted
) -> None:
    sdk = openai.OpenAI(
        base_url=f"{live.url}/v1",
        api_key="lmsp_" + "y" * 43,
        max_retries=2,
        http_client=counted.client,
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        sdk.responses.create(model=MODEL, input="Hi")
    assert refused.value.status_code == 401
    assert "not known to the service" in str(refused.value)
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert counted.sent == ["POST /v1/responses"]
