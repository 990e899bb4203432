"""A request through `lmsp-desktop serve` on a model found in each store (issue 23 item 1):
a fresh HOME holding the demo model as an Ollama blob, a Hugging Face cache snapshot, an LM
Studio file and an LM Studio model split in three parts; each answers through llama.cpp."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support import model_stores as stores
from tests.support.cut_model import cut_demo_model
from tests.support.fake_hub import FakeHub
from tests.support.hub_repos import DEMO_FILE, DEMO_REPO, hub_repos
from tests.support.polling import until, until_sync
from tests.support.split_model import copy_split_cut_model

MODELS = {
    "smollm2:135m": "ollama",
    "huggingfacetb/smollm2-135m-instruct-gguf:q4_1": "huggingface",
    "lmstudio-community/smollm2-135m-instruct-gguf:q4_1": "lmstudio",
    "me/smollm2-split-gguf:q4_1": "lmstudio",
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each store holds the demo model cut to 4 blocks (tests/support/cut_model.py): the
    claim is that each store's model is found, verified and answers, not what it says, and
    each of the four was hashed, loaded and probed (160 tokens) as the whole demo model."""
    home = tmp_path / "home"
    cut = cut_demo_model()
    stores.add_ollama_model(home, "smollm2", "135m", src=cut)
    stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf", src=cut)
    stores.add_lmstudio_file(
        home,
        "lmstudio-community",
        "SmolLM2-135M-Instruct-GGUF",
        "SmolLM2-135M-Instruct-Q4_1.gguf",
        src=cut,
    )
    split = home / ".lmstudio" / "models" / "me" / "SmolLM2-Split-GGUF"
    split.mkdir(parents=True)
    copy_split_cut_model(split / "SmolLM2-135M-Instruct-Q4_1.gguf")
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return home


def test_a_model_from_each_store_answers_through_serve(home: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    token = create_token(data)
    serve = ServeProcess(data, "--max-context", "2048")
    url = serve.start()
    try:

        def listed() -> dict[str, dict[str, object]] | None:
            status, body = call(f"{url}/v1/models", token)
            assert status == 200, body
            models = {m["id"]: m for m in body["data"]}
            ready = all(models.get(m, {}).get("verified_at") for m in MODELS)
            return models if ready else None

        models = until_sync(listed, 120, "the stores' models to be verified", 0.2)
        for model_id, source in MODELS.items():
            assert models[model_id]["source"] == source
            status, body = call(
                f"{url}/v1/chat/completions",
                token,
                "POST",
                {
                    "model": model_id,
                    "messages": [{"role": "user", "content": "Say hello."}],
                    "max_tokens": 4,
                    "temperature": 0,
                },
            )
            assert status == 200, (model_id, body)
            assert body["choices"][0]["message"]["content"].strip(), (model_id, body)
        # Nothing of the split model's other parts is listed: it is one model.
        assert not [m for m in models if "0000" in m]
    finally:
        assert serve.terminate() == 0, serve.stderr()[-2000:]


async def test_a_model_downloaded_into_the_hf_cache_is_listed_and_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hugging Face cache source picks up what `POST /v1/models/pull` downloads (from a
    local hub speaking the download protocol): listed by its hub name, its digest matching
    the hub's, and it runs."""
    server = FakeHub(hub_repos())
    await server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    data = tmp_path / "data"
    token = await asyncio.to_thread(create_token, data)
    serve = ServeProcess(data, "--max-context", "2048")
    url = await asyncio.to_thread(serve.start)
    model_id = f"{DEMO_REPO.lower()}:q4_1"
    try:
        status, task = await asyncio.to_thread(
            call, f"{url}/v1/models/pull", token, "POST", {"repo": DEMO_REPO}
        )
        assert status == 202, task

        async def listed() -> dict[str, object] | None:
            _, body = await asyncio.to_thread(call, f"{url}/v1/models", token)
            found = [m for m in body["data"] if m["id"] == model_id]
            return found[0] if found and found[0]["verified_at"] else None

        item = await until(listed, 120, f"{model_id} to be listed and verified")
        sha = server.repos[DEMO_REPO].sha256(DEMO_FILE)
        assert item["source"] == "huggingface", item
        assert item["published_digest"] == item["digest"] == f"sha256:{sha}", item
        assert item["digest_matches"] is True
        status, body = await asyncio.to_thread(
            call,
            f"{url}/v1/chat/completions",
            token,
            "POST",
            {"model": model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        )
        assert status == 200, body
    finally:
        await asyncio.to_thread(serve.terminate)
        await server.stop()
