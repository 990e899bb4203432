"""LoadSettings reach llama.cpp's own parameter structs: GPU layers in llama_model_params,
KV cache type and flash attention in llama_context_params (the C calls are doubles here;
the integration tests load for real)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines import llama_native as native


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    lc = native.lowlevel()
    seen: dict[str, Any] = {}

    def load(path: bytes, params: Any) -> int:
        seen["model"] = params
        return 1

    def init(model: Any, params: Any) -> int:
        seen["context"] = params
        return 1

    monkeypatch.setattr(lc, "llama_model_load_from_file", load)
    monkeypatch.setattr(lc, "llama_init_from_model", init)
    return seen


@pytest.mark.parametrize("layers", [0, 7, -1])
def test_gpu_layers_reach_llama_model_params(captured: dict[str, Any], layers: int) -> None:
    native.load_model(Path("m.gguf"), lambda _v: None, gpu_layers=layers)
    assert captured["model"].n_gpu_layers == layers


def test_a_q8_0_cache_sets_both_types_and_turns_flash_attention_on(
    captured: dict[str, Any],
) -> None:
    lc = native.lowlevel()
    native.open_context(
        1, n_ctx_seq=512, n_seq=2, n_threads=1, n_batch=64, kv_type="q8_0", flash_attn=True
    )
    params = captured["context"]
    assert params.type_k == params.type_v == lc.GGML_TYPE_Q8_0
    assert params.flash_attn_type == lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert (params.n_ctx, params.n_seq_max) == (1024, 2)
    # One KV stream per sequence, sliding-window layers kept whole (docs/memory.md).
    assert params.kv_unified is False and params.swa_full is True


def test_an_f16_cache_runs_without_flash_attention(captured: dict[str, Any]) -> None:
    # Off, as llama-cpp-python's Llama: prompt chunks at llama.cpp's speed with numerics
    # that do not depend on the chunking (docs/prefill.md).
    lc = native.lowlevel()
    native.open_context(1, n_ctx_seq=512, n_seq=1, n_threads=1, n_batch=64)
    params = captured["context"]
    assert params.type_k == params.type_v == lc.GGML_TYPE_F16
    assert params.flash_attn_type == lc.LLAMA_FLASH_ATTN_TYPE_DISABLED
