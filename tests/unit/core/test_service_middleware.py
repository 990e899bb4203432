"""The service's middlewares on the real route table (build_app) over real HTTP: a 404 for a
base URL with `/v1` doubled or missing names the base URL to use, in the shape of the API the
client meant; a malformed token is refused naming the header it came in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from lmsp_desktop.core.config import Settings
from lmsp_desktop.core.follow import EventFollower
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.service.app import build_app
from lmsp_desktop.core.service.context import ServiceContext
from lmsp_desktop.core.storage.store import Store

Http = TestClient[Any, Any]


@pytest.fixture
async def http(store: Store) -> AsyncIterator[Http]:
    ctx = ServiceContext(
        store=store,
        settings=Settings(),
        registry=ModelRegistry(store.db, [], include_demo=False),
        follower=EventFollower(store.tasks),
    )
    client: Http = TestClient(TestServer(build_app(ctx), host="127.0.0.1", port=0))
    await client.start_server()
    ctx.port = client.port  # the Host guard admits the port really bound
    try:
        yield client
    finally:
        await client.close()


def root_of(http: Http) -> str:
    return f"http://127.0.0.1:{http.port}"


async def error_of(http: Http, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with http.request(method, path, **kwargs) as answer:
        return answer.status, await answer.json()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/responses"),
        ("POST", "/chat/completions"),
        ("POST", "/completions"),
        ("POST", "/embeddings"),
        ("GET", "/models"),
        ("GET", "/models/smollm2-135m-instruct"),  # a route with a variable matches too
    ],
)
async def test_an_openai_path_without_v1_says_the_base_url_ends_in_v1(
    http: Http, method: str, path: str
) -> None:
    """What `OpenAI(base_url="http://127.0.0.1:PORT")` sends: the fix is `…/v1`."""
    status, body = await error_of(http, method, path, json={})
    assert status == 404
    assert body["error"]["code"] == "unknown_route"  # OpenAI's shape, the route's API
    message = body["error"]["message"]
    assert message.startswith(f"There is no route {method} {path}: ")
    assert f"base URL ending in /v1: {root_of(http)}/v1." in message


async def test_v1_doubled_before_messages_says_to_give_anthropics_sdk_the_root(
    http: Http,
) -> None:
    """What `Anthropic(base_url="http://127.0.0.1:PORT/v1")` sends: the answer is in
    Anthropic's shape, as for /v1/messages, and names the root as the base URL."""
    for path in ("/v1/v1/messages", "/v1/v1/messages/count_tokens"):
        status, body = await error_of(http, "POST", path, json={})
        assert status == 404
        assert body["type"] == "error"
        assert body["error"]["type"] == "not_found_error"
        assert body["error"]["code"] == "unknown_route"
        message = body["error"]["message"]
        assert message.startswith(f"There is no route POST {path}: ")
        assert "already ends in /v1 and the SDK adds another" in message
        assert f"the service root, {root_of(http)}, without /v1." in message


async def test_v1_doubled_before_an_openai_path_says_to_drop_one(http: Http) -> None:
    status, body = await error_of(http, "POST", "/v1/v1/chat/completions", json={})
    assert status == 404 and body["error"]["code"] == "unknown_route"
    message = body["error"]["message"]
    assert "already ends in /v1 and the client adds another: drop one /v1" in message
    assert f"adds /v1 itself takes {root_of(http)};" in message
    assert f"OpenAI's SDKs take {root_of(http)}/v1." in message


async def test_messages_without_v1_says_what_each_client_takes(http: Http) -> None:
    status, body = await error_of(http, "POST", "/messages", json={})
    assert status == 404
    assert body["type"] == "error" and body["error"]["code"] == "unknown_route"
    message = body["error"]["message"]
    assert "the path is /v1/messages." in message
    assert f"take the service root, {root_of(http)}, and add /v1 themselves" in message
    assert f"a client that adds only /messages takes {root_of(http)}/v1." in message


async def test_the_advice_names_the_host_the_client_used(http: Http) -> None:
    headers = {"Host": f"localhost:{http.port}"}
    _, body = await error_of(http, "POST", "/responses", json={}, headers=headers)
    assert f"http://localhost:{http.port}/v1." in body["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/nothing"),  # under /v1 once: no base URL makes it a route
        ("GET", "/index.html"),  # (GET / answers "Ollama is running", as Ollama's root)
        ("POST", "/v2/responses"),
        ("POST", "/v1/v1/nothing"),
        ("POST", "/nothing"),
    ],
)
async def test_other_unknown_routes_keep_the_plain_404(http: Http, method: str, path: str) -> None:
    status, body = await error_of(http, method, path)
    assert status == 404 and body["error"]["code"] == "unknown_route"
    assert body["error"]["message"] == (f"There is no route {method} {path}. See /v1/openapi.json.")


async def test_an_unknown_route_under_api_answers_in_ollamas_shape(http: Http) -> None:
    """Ollama's clients read `{"error": "..."}` (core/api/ollama/errors.py says what)."""
    status, body = await error_of(http, "GET", "/api/nothing")
    assert status == 404 and isinstance(body["error"], str) and "/api/" in body["error"]


async def test_a_known_path_with_the_wrong_method_is_still_405(http: Http) -> None:
    status, body = await error_of(http, "GET", "/v1/responses")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("headers", "named"),
    [
        ({"x-api-key": "nope"}, "The x-api-key header is not an `lmsp_…` token"),
        ({"Authorization": "Bearer nope"}, "The Authorization header is not `Bearer lmsp_…`"),
    ],
)
async def test_a_malformed_token_is_refused_naming_its_header(
    http: Http, headers: dict[str, str], named: str
) -> None:
    """`Anthropic(api_key="nope")` sends `x-api-key: nope`; the 401 names that header, in
    the route's shape, and never repeats the key."""
    status, body = await error_of(http, "POST", "/v1/messages", json={}, headers=headers)
    assert status == 401 and body["type"] == "error"
    assert body["error"]["code"] == "invalid_token"
    message = body["error"]["message"]
    assert message.startswith(named)
    assert "lmsp-desktop token create" in message  # how to get a token, as before
    assert "nope" not in message
