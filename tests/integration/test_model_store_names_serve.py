"""Names that follow the user's stores, through a real served Core (real SQLite, real HTTP,
llama.cpp running the cut demo model): an Ollama blob tagged twice answers to each tag, a tag
re-pulled to a new blob runs the new blob, and a model pulled while the service runs answers
at once (walk D, findings 1-3)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.serve_process import call
from tests.integration.service_fixtures import LiveCore
from tests.support import model_stores as stores
from tests.support.cut_model import cut_demo_model
from tests.support.polling import until_sync


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return stores.fresh_home(tmp_path, monkeypatch)


@pytest.fixture
def start(tmp_path: Path, home: Path) -> Iterator[Any]:
    """Starts a Core over the stores under `home` (as the test has laid them out)."""
    started: list[LiveCore] = []

    def run() -> LiveCore:
        started.append(LiveCore(tmp_path / "data"))
        return started[-1]

    yield run
    for live in started:
        live.stop()


def padded_cut(tmp_path: Path, n: int) -> Path:
    """The cut demo model with `n` bytes after its tensors: another blob, the same model."""
    path = tmp_path / f"cut-padded{n}.gguf"
    shutil.copyfile(cut_demo_model(), path)
    with path.open("ab") as f:
        f.write(b"\0" * n)
    return path


def chat(live: LiveCore, token: str, route: str, model: str) -> tuple[int, Any]:
    messages = [{"role": "user", "content": "Hi"}]
    if route == "/api/chat":
        body = {"model": model, "messages": messages, "stream": False}
        body["options"] = {"num_predict": 2, "temperature": 0}
    else:
        body = {"model": model, "messages": messages, "max_tokens": 2, "temperature": 0}
    return call(f"{live.url}{route}", token, "POST", body)


def verified(live: LiveCore, token: str) -> dict[str, dict[str, Any]]:
    """GET /v1/models once every model is verified."""

    def settled() -> dict[str, dict[str, Any]] | None:
        status, body = call(f"{live.url}/v1/models", token)
        assert status == 200, body
        models = {m["id"]: m for m in body["data"]}
        return models if all(m["verified_at"] for m in models.values()) else None

    return until_sync(settled, 60, "every model to be verified", 0.05)


def test_an_ollama_blob_tagged_twice_answers_to_each_tag_on_every_api(
    home: Path, tmp_path: Path, start: Any
) -> None:
    """`ollama pull smollm2` then `ollama pull smollm2:135m` leave one blob under two tags:
    Open WebUI sends `smollm2` (that is `smollm2:latest`), an OpenAI client the tag it saw
    in /api/tags; each answers, and /api/tags lists both tags, as `ollama list` does. Then
    `smollm2:135m` re-pulled to a new blob runs that blob; `smollm2:latest` keeps the old."""
    old = stores.add_ollama_model(home, "smollm2", "latest", cut_demo_model())
    stores.add_ollama_model(home, "smollm2", "135m", cut_demo_model())
    live = start()
    token = live.token("models:read", "responses:read", "responses:write", "admin")
    status, tags = call(f"{live.url}/api/tags", token)
    assert status == 200, tags
    names = {m["name"] for m in tags["models"]}
    assert {"smollm2:135m", "smollm2:latest"} <= names, names
    for route, model in (
        ("/api/chat", "smollm2"),
        ("/api/chat", "smollm2:135m"),
        ("/v1/chat/completions", "smollm2:latest"),
        ("/v1/chat/completions", "smollm2:135m"),
        ("/v1/chat/completions", "smollm2"),  # no tag means `:latest` here too, as in Ollama
        ("/v1/messages", "smollm2"),
    ):
        status, body = chat(live, token, route, model)
        assert status == 200, (route, model, body)
    status, body = chat(live, token, "/v1/chat/completions", "smollm2:7b")
    assert status == 404, body
    assert "This service has smollm2:135m, smollm2:latest" in body["error"]["message"], body
    assert verified(live, token)["smollm2:135m"]["aliases"] == ["smollm2:latest"]

    newer = padded_cut(tmp_path, 32)
    stores.add_ollama_model(home, "smollm2", "135m", newer)  # `ollama pull smollm2:135m`
    status, body = call(f"{live.url}/v1/models/rescan", token, "POST")
    assert status == 200, body
    models = verified(live, token)
    ours = {i: m for i, m in models.items() if i.startswith("smollm2:")}
    assert set(ours) == {"smollm2:135m", "smollm2:latest"}  # no `smollm2:135m-2`
    assert ours["smollm2:135m"]["digest"] == "sha256:" + stores.sha256_hex(newer)
    assert ours["smollm2:latest"]["digest"] == "sha256:" + stores.sha256_hex(old)
    for model in ("smollm2:135m", "smollm2"):
        status, body = chat(live, token, "/api/chat", model)
        assert status == 200, (model, body)


def test_a_model_pulled_while_the_service_runs_answers_at_once(
    home: Path, tmp_path: Path, start: Any
) -> None:
    """`ollama pull` while the service runs, then Open WebUI asks for it (or lists models):
    no manual rescan. The registry looks again when the last scan is older than
    `rescan_after_s` (2 s in use; 0 here, so that the test needs no clock)."""
    live = start()
    live.core.registry.rescan_after_s = 0
    token = live.token("models:read", "responses:read", "responses:write")
    stores.add_ollama_model(home, "tiny", "1b", cut_demo_model())
    status, body = chat(live, token, "/api/chat", "tiny:1b")  # waits for its hash, then runs
    assert status == 200, body
    stores.add_ollama_model(home, "other", "1b", padded_cut(tmp_path, 32))

    def tagged() -> bool:  # /api/tags lists runnable models: found, then hashed
        status, tags = call(f"{live.url}/api/tags", token)
        assert status == 200, tags
        return "other:1b" in {m["name"] for m in tags["models"]}

    until_sync(tagged, 60, "/api/tags to list other:1b", 0.05)
    stores.add_ollama_model(home, "third", "1b", padded_cut(tmp_path, 64))
    status, models = call(f"{live.url}/v1/models", token)
    assert "third:1b" in {m["id"] for m in models["data"]}, models
    for route in ("/api/chat", "/v1/chat/completions"):
        status, body = chat(live, token, route, "nothing:1b")
        assert status == 404, body
        message = body["error"] if route == "/api/chat" else body["error"]["message"]
        assert "`lmsp-desktop models rescan`" in message, message
