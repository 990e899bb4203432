"""Files that are not models, over real HTTP (issue 24 items 7 and 14): `/v1/models` lists them
as `state: "invalid"` with the reason, and a request on one answers 400 `model_invalid`,
never a 5xx, with nothing stored."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.service_fixtures import (
    ALL_SCOPES,
    LiveCore,
    auth,
    expect_error,
)
from tests.support.polling import until_sync

pytest_plugins = ["tests.integration.service_fixtures"]

NOISE, HALF = "noise", "half"


@pytest.fixture(scope="module")
def junk_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    folder = tmp_path_factory.mktemp("junk-models")
    (folder / "noise.gguf").write_bytes(os.urandom(64 * 1024))
    demo = demo_model_path()
    assert demo is not None
    with demo.open("rb") as src:  # a cut copy: its header whole, half its tensors
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


async def test_models_that_cannot_load_are_listed_as_invalid_with_the_reason(
    junk_live: LiveCore,
) -> None:
    headers = auth(junk_live.token(*ALL_SCOPES))
    async with aiohttp.ClientSession(base_url=junk_live.url) as http:
        async with http.get("/v1/models", headers=headers) as r:
            assert r.status == 200
            listed = {m["id"]: m for m in (await r.json())["data"]}
        async with http.get(f"/v1/models/{HALF}", headers=headers) as r:
            assert r.status == 200
            assert await r.json() == listed[HALF]
    for model_id in (NOISE, HALF):
        item = listed[model_id]
        assert item["state"] == "invalid", item
        assert item["context_length"] is None  # not "4096": it runs with no context at all
        assert item["source"] == "folder"
    assert "magic" in listed[NOISE]["reason"]
    # Its header is fine: the reason says what is wrong, not that the header is unreadable.
    assert "shorter than its tensors need" in listed[HALF]["reason"]
    assert "header" not in listed[HALF]["reason"]
    assert listed["smollm2-135m-instruct"]["state"] in ("unloaded", "loaded")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"input": "hi", "background": True}),
    ],
)
async def test_a_request_on_an_invalid_model_is_400_and_stores_nothing(
    junk_live: LiveCore, path: str, body: dict[str, Any]
) -> None:
    headers = auth(junk_live.token(*ALL_SCOPES))
    before = junk_live.call(junk_live.core.store.db.fetchone("SELECT COUNT(*) AS n FROM tasks"))
    async with aiohttp.ClientSession(base_url=junk_live.url) as http:
        for model_id in (NOISE, HALF):
            async with http.post(path, json={**body, "model": model_id}, headers=headers) as r:
                error = await expect_error(r, 400, "model_invalid", "model")
            assert model_id in error["message"] or ".gguf" in error["message"]
    after = junk_live.call(junk_live.core.store.db.fetchone("SELECT COUNT(*) AS n FROM tasks"))
    assert after["n"] == before["n"]
