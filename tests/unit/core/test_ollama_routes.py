"""Ollama's routes over real HTTP (a Core on port 0, the fake engine, a small GGUF): every
error under /api/ has Ollama's shape, `{"error": "…"}`, with what to do instead for Ollama's
model management."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lmsp_desktop.app import Core
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.clients import create_client
from tests.unit.core.test_models_gguf_meta import write_gguf

SCOPES = frozenset({"models:read", "responses:read", "responses:write"})


class Service:
    def __init__(self, core: Core, http: aiohttp.ClientSession, token: str) -> None:
        self.core, self.http = core, http
        self.headers = {"Authorization": f"Bearer {token}"}

    async def call(
        self, method: str, path: str, body: Any = None, *, token: bool = True
    ) -> tuple[int, Any]:
        headers = self.headers if token else {}
        async with self.http.request(
            method, self.core.url + path, json=body, headers=headers
        ) as answer:
            return answer.status, await answer.json(content_type=None)


@pytest.fixture
async def service(data_dir: Path, tmp_path: Path) -> AsyncIterator[Service]:
    models = tmp_path / "models"
    models.mkdir()
    write_gguf(models / "tiny.gguf")
    core = Core(data_dir, port=0, engine=FakeEngine(), model_dirs=[models], include_demo=False)
    await core.start()
    await core.registry.gate.wait_settled()
    _, token = await create_client(core.store.db, "ollama-test", SCOPES)
    try:
        async with aiohttp.ClientSession() as http:
            yield Service(core, http, token)
    finally:
        await core.stop()


@pytest.mark.parametrize(
    ("method", "path", "says"),
    [
        ("POST", "/api/pull", "lmsp-desktop models pull REPO[:QUANT]"),
        ("POST", "/api/push", "does not push models"),
        ("POST", "/api/create", "lmsp-desktop serve --models-dir DIR"),
        ("POST", "/api/blobs/sha256:" + "0" * 64, "put a GGUF file in a model folder"),
        ("POST", "/api/copy", "does not copy or rename models"),
        ("DELETE", "/api/delete", "ollama rm NAME"),
    ],
)
async def test_ollamas_model_management_says_what_to_do_instead(
    service: Service, method: str, path: str, says: str
) -> None:
    for token in (True, False):  # a route that is none is 404 with or without a token
        status, answer = await service.call(method, path, {"model": "tiny"}, token=token)
        assert status == 404
        assert set(answer) == {"error"} and isinstance(answer["error"], str), answer
        assert answer["error"].startswith(f"{method} {path} is not offered here: ")
        assert says in answer["error"]


async def test_any_other_error_under_api_has_ollamas_shape(service: Service) -> None:
    status, answer = await service.call("POST", "/api/nothing", {})
    assert status == 404 and set(answer) == {"error"}, answer
    assert answer["error"].startswith("There is no route POST /api/nothing.")
    assert "POST /api/chat" in answer["error"] and "GET /api/tags" in answer["error"]
    async with service.http.get(service.core.url + "/api/chat", headers=service.headers) as got:
        assert got.status == 405 and got.headers["Allow"] == "POST"
        assert await got.json() == {"error": "GET is not allowed on /api/chat."}
    # Outside /api/ the service's own shape is unchanged.
    status, answer = await service.call("POST", "/v1/nothing", {})
    assert status == 404 and answer["error"]["code"] == "unknown_route"
    status, answer = await service.call("GET", "/apix/tags")
    assert status == 404 and answer["error"]["code"] == "unknown_route"
