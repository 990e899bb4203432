"""Every answer carries a request id, as the SDKs read it (Anthropic's `request-id` and its
error bodies' `request_id`, OpenAI's `x-request-id`), over real HTTP with the demo model; and
a 507 (a load that cannot fit) tells the SDKs not to retry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2  # the anthropic SDK's own HTTP client (not httpx's objects)
import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models import machine
from tests.integration.service_fixtures import MODEL, LiveCore
from tests.support.fake_core import running_core, token
from tests.support.plain_http import anthropic_sdk, openai_sdk, plain_client

pytest_plugins = ["tests.integration.service_fixtures"]

PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def web(live: LiveCore) -> Iterator[httpx.Client]:
    with plain_client(live) as client:
        yield client


def test_every_answer_carries_a_request_id_the_sdks_read(web: httpx.Client) -> None:
    claude, gpt = anthropic_sdk(web), openai_sdk(web)
    message = claude.messages.create(
        model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message._request_id and message._request_id.startswith("req_")
    chat = gpt.chat.completions.create(
        model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}]
    )
    assert chat._request_id and chat._request_id.startswith("req_")
    assert chat._request_id != message._request_id  # one per request
    # An Anthropic error: the id in the SDK's error, and in the body beside `error`.
    with pytest.raises(anthropic.APIStatusError) as refused:
        claude.messages.create(model=MODEL, max_tokens=4, messages=[])
    body: Any = refused.value.body
    assert refused.value.request_id and refused.value.request_id.startswith("req_")
    assert body["request_id"] == refused.value.request_id and body["type"] == "error", body
    # Errors no route answers, and streams, whose headers go before their body.
    unknown = web.get("/v1/no-such-route")
    assert unknown.status_code == 404
    assert unknown.headers["request-id"] == unknown.headers["x-request-id"]
    assert unknown.headers["x-request-id"].startswith("req_")
    body = {"model": MODEL, "max_tokens": 4, "stream": True, "messages": PARIS}
    with web.stream("POST", "/v1/messages", json=body) as streamed:
        assert streamed.status_code == 200 and streamed.headers["request-id"].startswith("req_")
        streamed.read()
    claude.close()
    gpt.close()


# -- a machine without the memory for the model ----------------------------------------------
async def test_a_load_that_cannot_fit_is_not_retried_by_the_anthropic_sdk(tmp_path: Path) -> None:
    """507 insufficient_memory before any task says `x-should-retry: false`: the anthropic
    SDK (two retries by default) asks once, as it does after a 401."""
    async with running_core(tmp_path, FakeEngine()) as core:
        assert core.fitter is not None
        core.fitter.memory = lambda: machine.HostMemory(64 << 30, 50 << 20, "MemAvailable")
        secret = await token(core, "responses:write")
        sent: list[str] = []

        async def count(request: httpx2.Request) -> None:
            sent.append(request.url.path)

        async with (
            httpx2.AsyncClient(event_hooks={"request": [count]}) as http,
            anthropic.AsyncAnthropic(base_url=core.url, api_key=secret, http_client=http) as sdk,
        ):
            with pytest.raises(anthropic.APIStatusError) as refused:
                await sdk.messages.create(model=MODEL, max_tokens=4, messages=PARIS)  # type: ignore[arg-type]
    assert refused.value.status_code == 507
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert "insufficient_memory" in refused.value.response.text
    assert sent == ["/v1/messages"]  # asked once
