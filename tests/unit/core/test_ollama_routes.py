"""Ollama's routes over real HTTP (a Core on port 0, the fake engine, a small GGUF): a model
named with `:latest` is the model without it on every route that takes a name, /api/tags and
/api/ps show the names that find each model, and every error under /api/ has Ollama's shape,
`{"error": "…"}`, with what to do instead for Ollama's model management."""

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
SAID = {"role": "user", "content": "Hi"}


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


async def test_latest_names_the_model_on_every_route_that_takes_a_name(service: Service) -> None:
    status, shown = await service.call("POST", "/api/show", {"model": "tiny:latest"})
    assert status == 200, shown
    assert shown["details"]["format"] == "gguf"
    for path, body in (
        ("/api/chat", {"messages": [SAID]}),
        ("/api/generate", {"prompt": "Hi"}),
    ):
        status, answer = await service.call(
            "POST", path, {"model": "tiny:latest", "stream": False, **body}
        )
        assert status == 200, (path, answer)
        assert answer["done"] is True
        assert answer["model"] == "tiny:latest"  # echoed as sent, as Ollama does
    # The tasks run the model itself, `tiny`.
    status, listed = await service.call("GET", "/v1/tasks")
    assert [task["model"] for task in listed["data"]] == ["tiny", "tiny"]


async def test_tags_and_ps_show_the_name_ollama_clients_send(service: Service) -> None:
    status, tags = await service.call("GET", "/api/tags")
    assert status == 200
    assert [(m["name"], m["model"]) for m in tags["models"]] == [("tiny:latest", "tiny:latest")]
    await service.call("POST", "/api/chat", {"model": "tiny", "messages": [SAID], "stream": False})
    status, ps = await service.call("GET", "/api/ps")
    assert [(m["name"], m["model"]) for m in ps["models"]] == [("tiny:latest", "tiny:latest")]


async def test_no_such_model_points_an_ollama_user_to_api_tags(service: Service) -> None:
    for path, body in (
        ("/api/show", {"model": "nothing:latest"}),
        ("/api/chat", {"model": "nothing:latest", "messages": [SAID]}),
        ("/api/generate", {"model": "nothing", "prompt": "Hi"}),
        ("/api/embed", {"model": "nothing:latest", "input": "Hi"}),
        ("/api/embeddings", {"model": "nothing:latest", "prompt": "Hi"}),
    ):
        status, answer = await service.call("POST", path, body)
        assert status == 404, (path, answer)
        assert isinstance(answer["error"], str), answer  # Ollama's shape
        assert f"no model {body['model']} here" in answer["error"]
        assert "GET /api/tags" in answer["error"], answer
    for path, body in (  # another tag is not tiny, but the 404 names the one there is
        ("/api/chat", {"model": "tiny:7b", "messages": [SAID]}),
        ("/api/show", {"model": "tiny:7b"}),
        ("/api/embed", {"model": "tiny:7b", "input": "Hi"}),
    ):
        status, answer = await service.call("POST", path, body)
        assert status == 404, (path, answer)
        assert answer["error"].startswith('model "tiny:7b" not found; this service has tiny:latest')
    status, listed = await service.call("GET", "/v1/tasks")
    assert listed["data"] == []  # nothing stored for them


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


async def test_show_of_a_file_that_is_not_a_model_answers_400_as_generate_does(
    service: Service, tmp_path: Path
) -> None:
    """A reviewer's 0-byte `empty.gguf`: /api/show answered 200 with `num_ctx 4096` and
    capabilities (Open WebUI would offer it) while /api/generate answered 400."""
    (tmp_path / "models" / "empty.gguf").write_bytes(b"")
    await service.core.registry.scan()  # the Models page's Rescan
    status, shown = await service.call("POST", "/api/show", {"model": "empty"})
    assert status == 400 and "empty" in shown["error"] and "0 bytes" in shown["error"], shown
    status, generated = await service.call(
        "POST", "/api/generate", {"model": "empty", "prompt": "Hi", "stream": False}
    )
    assert status == 400 and generated["error"] == shown["error"]
