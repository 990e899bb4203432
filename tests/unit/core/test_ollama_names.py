"""Ollama's model names (core/api/ollama/names.py): `name` and `name:latest` find one model,
an id that really ends in `:latest` (a model from Ollama's own store) still wins, and the names
/api/tags shows are the ones that find each model again."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsp_desktop.core.api.ollama.names import (
    find_model,
    ollama_names,
    other_spelling,
)
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.store import Store
from tests.support import model_stores as stores
from tests.unit.core.test_models_gguf_meta import write_gguf


def test_other_spelling_adds_or_drops_latest_only() -> None:
    assert other_spelling("smollm2-135m-instruct:latest") == "smollm2-135m-instruct"
    assert other_spelling("SmolLM2:LATEST") == "SmolLM2"
    assert other_spelling("smollm2-135m-instruct") == "smollm2-135m-instruct:latest"
    assert other_spelling("org/repo-gguf") == "org/repo-gguf:latest"
    assert other_spelling("qwen2.5:7b") is None  # another tag is another model
    assert other_spelling("org/repo-gguf:q4_k_m") is None
    assert other_spelling(":latest") is None


def test_names_shown_carry_a_tag_unless_that_name_is_another_model() -> None:
    assert ollama_names(["tiny", "qwen2.5:7b", "solo:latest", "both", "both:latest"]) == {
        "tiny": "tiny:latest",  # as Ollama shows `llama3:latest`
        "qwen2.5:7b": "qwen2.5:7b",
        "solo:latest": "solo:latest",
        "both": "both",  # `both:latest` is the Ollama store's model: the bare id finds this one
        "both:latest": "both:latest",
    }


@pytest.fixture
async def registry(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModelRegistry:
    """Folder models `tiny` and `both`; in Ollama's store `both:latest`, `solo:latest` and
    `qwen2.5:7b`."""
    folder = tmp_path / "models"
    folder.mkdir()
    write_gguf(folder / "tiny.gguf")
    write_gguf(folder / "both.gguf", payload=b"folder")
    home = tmp_path / "home"
    monkeypatch.setenv("OLLAMA_MODELS", str(stores.ollama_store(home)))
    for name, tag in (("both", "latest"), ("solo", "latest"), ("qwen2.5", "7b")):
        gguf = write_gguf(tmp_path / f"{name}-src.gguf", payload=f"ollama-{name}".encode())
        stores.add_ollama_model(home, name, tag, gguf)
    found = ModelRegistry(store.db, [folder], include_demo=False, sources=("ollama",))
    await found.scan()
    assert {m.id for m in await found.list_models()} == {
        "tiny",
        "both",
        "both:latest",
        "solo:latest",
        "qwen2.5:7b",
    }, found.problems
    return found


@pytest.mark.parametrize(
    ("asked", "found"),
    [
        ("tiny:latest", "tiny"),  # what ollama-python, Open WebUI and Continue send
        ("tiny", "tiny"),
        ("TINY:Latest", "tiny"),
        ("solo", "solo:latest"),  # `ollama run solo` means solo:latest
        ("solo:latest", "solo:latest"),
        ("both:latest", "both:latest"),  # the id that really ends in :latest wins
        ("both", "both"),
    ],
)
async def test_a_name_with_or_without_latest_finds_the_model(
    registry: ModelRegistry, asked: str, found: str
) -> None:
    assert (await find_model(registry, asked)).id == found


async def test_each_name_shown_finds_its_own_model(registry: ModelRegistry) -> None:
    listed = await registry.list_models()
    for model_id, shown in ollama_names(m.id for m in listed).items():
        assert (await find_model(registry, shown)).id == model_id, shown


@pytest.mark.parametrize("asked", ["nothing:latest", "nothing", "qwen2:7b"])
async def test_no_such_model_is_404_pointing_to_api_tags(
    registry: ModelRegistry, asked: str
) -> None:
    with pytest.raises(LmspError) as missing:
        await find_model(registry, asked)
    error = missing.value
    assert (error.status, error.code, error.param) == (404, "model_not_found", "model")
    assert f"no model {asked} here" in error.message
    assert "GET /api/tags" in error.message and "/v1/models" not in error.message


@pytest.mark.parametrize(
    ("asked", "told"),
    [
        # Ollama reads `qwen2.5` as `qwen2.5:latest`: not found, but say which tags there are.
        ("qwen2.5", 'model "qwen2.5" not found; this service has qwen2.5:7b.'),
        ("Qwen2.5:latest", 'model "Qwen2.5:latest" not found; this service has qwen2.5:7b.'),
        ("qwen2.5:14b", 'model "qwen2.5:14b" not found; this service has qwen2.5:7b.'),
        ("tiny:7b", 'model "tiny:7b" not found; this service has tiny:latest.'),
    ],
)
async def test_a_name_found_only_under_other_tags_is_404_naming_them(
    registry: ModelRegistry, asked: str, told: str
) -> None:
    with pytest.raises(LmspError) as missing:
        await find_model(registry, asked)
    error = missing.value
    assert (error.status, error.code, error.param) == (404, "model_not_found", "model")
    assert error.message.startswith(told), error.message


async def test_a_name_that_cannot_be_an_id_is_not_echoed(registry: ModelRegistry) -> None:
    for asked in ("../outside:latest", "tiny\x00:latest", "a" * 300):
        with pytest.raises(LmspError) as missing:
            await find_model(registry, asked)
        assert missing.value.status == 404
        assert asked not in missing.value.message and "(an invalid name)" in missing.value.message
