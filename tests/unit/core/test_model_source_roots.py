"""Where each store is looked for: the variables the apps themselves honour, in their order."""

from __future__ import annotations

from pathlib import Path

from lmsp_desktop.core.models.sources import hf_cache_root, lmstudio_roots, ollama_roots

HOME = Path("/home/ana")


def test_hugging_face_cache_follows_hf_hub_cache_then_hf_home_then_home() -> None:
    assert hf_cache_root({}, HOME) == HOME / ".cache/huggingface/hub"
    assert hf_cache_root({"HF_HOME": "/data/hf"}, HOME) == Path("/data/hf/hub")
    both = {"HF_HOME": "/data/hf", "HF_HUB_CACHE": "/fast/hub"}
    assert hf_cache_root(both, HOME) == Path("/fast/hub")


def test_ollama_follows_ollama_models_else_home() -> None:
    assert ollama_roots({}, HOME)[0] == HOME / ".ollama/models"
    assert ollama_roots({"OLLAMA_MODELS": "/srv/ollama"}, HOME)[0] == Path("/srv/ollama")


def test_lm_studio_reads_its_folder_and_the_older_one() -> None:
    assert lmstudio_roots(HOME) == [HOME / ".lmstudio/models", HOME / ".cache/lm-studio/models"]
