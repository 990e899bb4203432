"""A service with two files that are no models beside the demo: count_tokens on one answers
model_invalid, as a message on it does; `/v1/models` is paged by `limit` and `after` (and
Anthropic's `after_id`, through its SDK's own paging), all models without them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.service_fixtures import LiveCore
from tests.support.plain_http import plain_client
from tests.support.polling import until_sync

pytest_plugins = ["tests.integration.service_fixtures"]

PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
NOISE, HALF = "noise", "half"


@pytest.fixture(scope="module")
def junk_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    folder = tmp_path_factory.mktemp("junk-models")
    (folder / "noise.gguf").write_bytes(os.urandom(64 * 1024))
    demo = demo_model_path()
    assert demo is not None
    with demo.open("rb") as src:  # its header whole, half its tensors
        (folder / "half.gguf").write_bytes(src.read(demo.stat().st_size // 2))
    running = LiveCore(tmp_path_factory.mktemp("junk-core"), model_dirs=[folder])

    def settled() -> bool:
        states = {m.id: m.state for m in running.call(running.core.registry.list_models())}
        return states.get(NOISE) == states.get(HALF) == "invalid"

    until_sync(settled, 60, "the junk files to be checked", 0.05)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def junk_web(junk_live: LiveCore) -> Iterator[httpx.Client]:
    with plain_client(junk_live, timeout=60) as client:
        yield client


def test_count_tokens_of_a_file_that_is_no_model_says_so(junk_web: httpx.Client) -> None:
    body = {"model": NOISE, "messages": PARIS}
    refused = junk_web.post("/v1/messages/count_tokens", json=body)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "model_invalid" and "not a model" in error["message"], error


def test_the_model_list_is_paged_by_limit_and_after(junk_web: httpx.Client) -> None:
    everything = junk_web.get("/v1/models").json()
    ids = [m["id"] for m in everything["data"]]
    assert len(ids) == 3 and everything["has_more"] is False, ids
    first = junk_web.get("/v1/models", params={"limit": 2}).json()
    assert [m["id"] for m in first["data"]] == ids[:2] and first["has_more"] is True
    rest = junk_web.get("/v1/models", params={"limit": 2, "after": ids[1]}).json()
    assert [m["id"] for m in rest["data"]] == ids[2:] and rest["has_more"] is False
    # Anthropic's cursors, through its SDK's own paging.
    token = junk_web.headers["Authorization"].removeprefix("Bearer ")
    with anthropic.Anthropic(base_url=str(junk_web.base_url).rstrip("/"), api_key=token) as sdk:
        page = sdk.models.list(limit=1)
        assert [m.id for m in page.data] == ids[:1] and page.has_more
        assert [m.id for m in sdk.models.list(limit=1)] == ids  # every page, one at a time
    unknown = junk_web.get("/v1/models", params={"after": "no-such-model"})
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "after"
