"""A request through `lmsp-desktop serve` on a model found in each store (issue 23 item 1):
a fresh HOME holding the demo model as an Ollama blob, a Hugging Face cache snapshot, an LM
Studio file and an LM Studio model split in three parts; each answers through llama.cpp."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support import model_stores as stores
from tests.support.gguf_split import split_gguf
from tests.support.polling import until_sync

MODELS = {
    "smollm2:135m": "ollama",
    "huggingfacetb/smollm2-135m-instruct-gguf:q4_1": "huggingface",
    "lmstudio-community/smollm2-135m-instruct-gguf:q4_1": "lmstudio",
    "me/smollm2-split-gguf:q4_1": "lmstudio",
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    stores.add_ollama_model(home, "smollm2", "135m")
    stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf")
    stores.add_lmstudio_file(
        home, "lmstudio-community", "SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q4_1.gguf"
    )
    split = home / ".lmstudio" / "models" / "me" / "SmolLM2-Split-GGUF"
    split.mkdir(parents=True)
    split_gguf(stores.demo(), split / "SmolLM2-135M-Instruct-Q4_1.gguf")
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return home


def test_a_model_from_each_store_answers_through_serve(home: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    token = create_token(data)
    serve = ServeProcess(data)
    url = serve.start()
    try:

        def listed() -> dict[str, dict[str, object]] | None:
            status, body = call(f"{url}/v1/models", token)
            assert status == 200, body
            models = {m["id"]: m for m in body["data"]}
            ready = all(models.get(m, {}).get("state") == "unloaded" for m in MODELS)
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
