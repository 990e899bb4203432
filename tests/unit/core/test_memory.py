"""The memory estimate and the settings fitted to it: KV cache arithmetic from the header,
the budget rule, the default context, the refusal's message and GPU layer fitting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lmsp_desktop.core.engines.base import ALL_LAYERS, EMBEDDING_CONTEXT, ContextShape, LoadSettings
from lmsp_desktop.core.engines.llama import LlamaEngine
from lmsp_desktop.core.models import machine
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.gguf_meta import GGUFMeta, read_gguf_meta
from lmsp_desktop.core.models.memory import (
    DEFAULT_CONTEXT_CAP,
    GIB,
    Budget,
    ModelSettings,
    ModelShape,
    estimate,
    fit_gpu_layers,
    plan,
)

MIB = 1 << 20


def demo_shape(trained: int | None = None) -> ModelShape:
    path = demo_model_path()
    assert path is not None
    meta = read_gguf_meta(path)
    if trained is not None:
        meta.context_length = trained
    return ModelShape.from_gguf(meta, path.stat().st_size)


def one(settings: LoadSettings) -> list[ContextShape]:
    assert settings.parallel and settings.context_length
    return [ContextShape(settings.parallel, settings.context_length, 64)]


def plenty() -> Budget:
    return Budget(total=64 * GIB, available=60 * GIB, source="test")


def test_the_demo_models_kv_cache_is_23_kb_a_token_from_its_header() -> None:
    shape = demo_shape()
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 values for K and for V, f16.
    assert (shape.layers, shape.kv_heads[0], shape.key_length) == (30, 3, 64)
    per_token = sum(shape.kv_bytes_per_token("f16", i) for i in range(shape.layers))
    assert per_token == 2 * 30 * 3 * 64 * 2 == 23_040
    q8 = sum(shape.kv_bytes_per_token("q8_0", i) for i in range(shape.layers))
    assert q8 == pytest.approx(per_token * 34 / 64)
    cost = estimate(shape, [ContextShape(4, 8192, 64)])
    assert cost.kv_cache == 4 * 8192 * 23_040
    assert cost.weights == demo_model_path().stat().st_size  # type: ignore[union-attr]


def test_the_estimate_follows_the_engines_own_layout() -> None:
    shape = demo_shape()
    engine = LlamaEngine(n_threads=1, contexts=2)
    settings = LoadSettings(context_length=4096, parallel=4)
    shapes = engine.context_shapes(settings)
    assert [s.n_seq for s in shapes] == [2, 2]
    assert estimate(shape, shapes).kv_cache == 4 * 4096 * 23_040


def test_a_128k_model_gets_the_default_context_not_4_times_128k() -> None:
    shape = demo_shape(trained=131_072)
    decided = plan(shape, ModelSettings(), plenty(), one, default_parallel=4)
    assert decided.context_length == DEFAULT_CONTEXT_CAP
    assert decided.trained_context == 131_072
    assert decided.estimate.kv_cache == 4 * DEFAULT_CONTEXT_CAP * 23_040
    assert decided.fit == "fits"
    # Asked for explicitly, the trained length is honoured (and costs what it costs).
    full = plan(shape, ModelSettings(context_length=131_072), plenty(), one, default_parallel=4)
    assert full.context_length == 131_072
    assert full.estimate.kv_cache == 4 * 131_072 * 23_040


def test_the_context_never_exceeds_the_trained_one_or_the_global_cap() -> None:
    shape = demo_shape()  # trained 8192
    asked = plan(shape, ModelSettings(context_length=50_000), plenty(), one, default_parallel=1)
    assert asked.context_length == 8192
    capped = plan(shape, ModelSettings(), plenty(), one, default_parallel=1, context_cap=3000)
    assert capped.context_length == 3000
    # A global cap the user set above the default one is what the user wants by default.
    long = demo_shape(trained=131_072)
    wanted = plan(long, ModelSettings(), plenty(), one, default_parallel=1, context_cap=32_768)
    assert wanted.context_length == 32_768
    # A model's own context chooses within the cap, never past it (docs/memory.md).
    own = ModelSettings(context_length=32_768)
    assert plan(
        long, own, plenty(), one, default_parallel=1, context_cap=16_384
    ).context_length == (16_384)


def test_the_default_context_shrinks_to_the_budget() -> None:
    shape = demo_shape(trained=131_072)
    # Leave 2 GiB free (the minimum reserve): a budget of 600 MiB, less than 4 x 8,192
    # tokens of KV cache (720 MiB) alone.
    tight = Budget(total=8 * GIB, available=2 * GIB + 600 * MIB, source="test")
    decided = plan(shape, ModelSettings(), tight, one, default_parallel=4)
    assert 2048 <= decided.context_length < DEFAULT_CONTEXT_CAP
    assert decided.context_length % 256 == 0
    assert decided.estimate.total <= tight.budget
    bigger = plan(shape, ModelSettings(), tight, one, default_parallel=4).context_length
    one_more_step = plan(
        shape, ModelSettings(context_length=bigger + 256), tight, one, default_parallel=4
    )
    assert one_more_step.estimate.total > tight.budget  # it was the largest that fits


def test_the_budget_leaves_the_larger_of_2_gb_and_a_fifth_free() -> None:
    assert Budget(total=8 * GIB, available=6 * GIB, source="t").budget == 4 * GIB
    big = Budget(total=100 * GIB, available=50 * GIB, source="t")
    assert big.reserve == 20 * GIB and big.budget == 30 * GIB
    assert big.fit(30 * GIB) == "fits"
    assert big.fit(40 * GIB) == "tight"
    assert big.fit(51 * GIB) == "wont_fit"


def test_a_load_that_cannot_fit_says_the_numbers_and_what_to_lower() -> None:
    shape = demo_shape(trained=131_072)
    small = Budget(total=4 * GIB, available=300 * MIB, source="MemAvailable")
    decided = plan(shape, ModelSettings(context_length=131_072), small, one, default_parallel=4)
    assert decided.fit == "wont_fit"
    assert "needs about 11.80 GiB once its contexts fill" in decided.reason
    assert "KV cache 11.25 GiB" in decided.reason
    # The embedding context is no part of the load (it is checked when it opens).
    assert "embedding" not in decided.reason
    assert "300 MiB available (MemAvailable)" in decided.reason
    assert "context length or concurrent requests" in decided.reason
    assert "q8_0" in decided.reason


def test_the_compute_part_covers_a_long_prompts_attention_scores() -> None:
    """Measured (docs/memory.md): one context of 2 x 8,192 tokens, f16, after reading an
    8,100-token prompt in 512-row chunks holds 227 MiB beyond its KV cache (the attention
    scores of the last chunk over the whole context, in f32 and f16). Flash attention (the
    q8_0 cache) never makes those scores."""
    shape = demo_shape()
    f16 = estimate(shape, [ContextShape(2, 8192, 512)])
    assert 227 * MIB <= f16.compute <= 1.15 * 227 * MIB
    q8 = estimate(shape, [ContextShape(2, 8192, 512)], "q8_0")
    assert q8.compute < 50 * MIB


def test_the_embedding_context_is_counted_at_its_capped_size() -> None:
    """Measured (docs/memory.md): the demo's embedding context holds 211 MiB after a
    512-token input and 833 MiB after a 2,048-token one (logits of every token, twice). The
    estimate counts it for the longest input the context holds: the chat context, at most
    EMBEDDING_CONTEXT tokens, so a longer chat context does not make it grow."""
    shape = demo_shape()
    small = estimate(shape, [ContextShape(4, 512, 512)])
    assert 211 * MIB <= small.embedding <= 1.1 * 211 * MIB
    capped = estimate(shape, [ContextShape(4, EMBEDDING_CONTEXT, 512)])
    assert 833 * MIB <= capped.embedding <= 1.1 * 833 * MIB
    assert estimate(shape, [ContextShape(4, 8192, 512)]).embedding == capped.embedding
    # Not part of the load's total: it opens only for an embedding, at the size its inputs
    # need, and is held against the memory available then (test_context_room.py).
    assert capped.total == capped.weights + capped.kv_cache + capped.compute
    # It grows with the vocabulary (a row of logits per token).
    wide = replace(shape, vocab=4 * shape.vocab)
    assert estimate(wide, [ContextShape(4, 512, 512)]).embedding > 3 * small.embedding


def test_q8_0_roughly_halves_the_kv_cache() -> None:
    shape = demo_shape()
    f16 = plan(shape, ModelSettings(context_length=8192), plenty(), one, default_parallel=4)
    q8 = plan(
        shape, ModelSettings(context_length=8192, kv_type="q8_0"), plenty(), one, default_parallel=4
    )
    assert q8.settings.flash_attn and not f16.settings.flash_attn
    assert q8.estimate.kv_cache == pytest.approx(f16.estimate.kv_cache * 34 / 64, rel=1e-6)


def swa_shape(swa_full_layers: int = 6) -> ModelShape:
    """A Gemma-3-like header: 12 layers, every 6th global, a 512-token window."""
    meta = GGUFMeta(version=3, tensor_count=0, architecture="gemma3", context_length=32_768)
    meta.values = {
        "gemma3.block_count": 12,
        "gemma3.embedding_length": 640,
        "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 256,
        "gemma3.attention.sliding_window": 512,
        "gemma3.feed_forward_length": 2048,
    }
    meta.vocab_size = 262_144
    meta.layer_bytes = {i: 10 * MIB for i in range(12)}
    return ModelShape.from_gguf(meta, 300 * MIB)


def test_sliding_window_layers_cost_only_their_window_unless_swa_full() -> None:
    shape = swa_shape()
    assert sum(shape.swa_layers) == 10  # layers 6 and 12 are global
    ctx = [ContextShape(1, 32_768, 64)]
    per_layer = 1 * (256 + 256) * 2
    full = estimate(shape, ctx, swa_full=True)
    windowed = estimate(shape, ctx, swa_full=False)
    assert full.kv_cache == 12 * 32_768 * per_layer
    assert windowed.kv_cache == (2 * 32_768 + 10 * 768) * per_layer  # 512 + 64, padded


def test_gpu_layers_fit_the_devices_free_memory_from_the_last_layer_down() -> None:
    assert fit_gpu_layers([100, 100, 100, 100], free=350, reserve=0) == 3
    assert fit_gpu_layers([100, 100], free=10_000, reserve=0) == 2
    assert fit_gpu_layers([100], free=50, reserve=0) == 0
    shape = swa_shape()
    # auto with a device that holds everything: all layers; weights leave RAM for the GPU.
    roomy = plan(
        shape, ModelSettings(context_length=4096), plenty(), one, default_parallel=1, gpus=[8 * GIB]
    )
    assert roomy.settings.gpu_layers == ALL_LAYERS
    assert roomy.estimate.weights == 300 * MIB - 120 * MIB and roomy.estimate.gpu > 120 * MIB
    # Room for 4 layers past the reserve: each is 10 MiB of weights and 4 MiB of KV cache
    # (4096 tokens x 1 KV head x (256 + 256) values x 2 bytes).
    some = plan(
        shape,
        ModelSettings(context_length=4096),
        plenty(),
        one,
        default_parallel=1,
        gpus=[512 * MIB + 4 * 14 * MIB + MIB],
    )
    assert some.settings.gpu_layers == 4
    # No GPU (this machine's CPU build): auto is 0; a number set by the user is kept.
    cpu = plan(shape, ModelSettings(context_length=4096), plenty(), one, default_parallel=1)
    assert cpu.settings.gpu_layers == 0
    fixed = plan(
        shape, ModelSettings(context_length=4096, gpu_layers=7), plenty(), one, default_parallel=1
    )
    assert fixed.settings.gpu_layers == 7
    # More layers than the device holds: refused with the GPU's numbers, not left to fail.
    crowded = plan(
        shape,
        ModelSettings(context_length=4096, gpu_layers=ALL_LAYERS),
        plenty(),
        one,
        default_parallel=1,
        gpus=[100 * MIB],
    )
    assert crowded.fit == "wont_fit"
    assert "all layers on the GPU need about 168 MiB" in crowded.reason
    assert "100 MiB free on it" in crowded.reason and "Lower the GPU layers" in crowded.reason
    # Without a GPU those layers stay in RAM, and the estimate says so.
    assert fixed.estimate.weights == 300 * MIB and fixed.estimate.gpu == 0


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_host_memory_takes_the_tighter_of_memavailable_and_a_cgroup_v2_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(machine.AVAILABLE_ENV, raising=False)
    write(tmp_path, "proc/meminfo", "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n")
    write(tmp_path, "proc/self/cgroup", "0::/app.slice/lmsp\n")
    assert machine.host_memory(tmp_path).available == 8 * GIB  # no limit files: RAM
    write(tmp_path, "sys/fs/cgroup/app.slice/lmsp/memory.max", "max\n")
    write(tmp_path, "sys/fs/cgroup/app.slice/memory.max", f"{3 * GIB}\n")
    write(tmp_path, "sys/fs/cgroup/app.slice/memory.current", f"{1 * GIB}\n")
    write(tmp_path, "sys/fs/cgroup/app.slice/memory.stat", f"inactive_file {256 * MIB}\n")
    limited = machine.host_memory(tmp_path)
    assert limited.total == 3 * GIB
    assert limited.available == 2 * GIB + 256 * MIB  # page cache can be dropped
    assert limited.source == "cgroup v2 limit"
    monkeypatch.setenv(machine.AVAILABLE_ENV, "1.5G")
    overridden = machine.host_memory(tmp_path)
    assert overridden.available == int(1.5 * GIB)
    assert overridden.source == f"{machine.AVAILABLE_ENV}=1.5G"


def test_host_memory_reads_a_cgroup_v1_limit(tmp_path: Path) -> None:
    write(tmp_path, "proc/meminfo", "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n")
    write(tmp_path, "proc/self/cgroup", "4:memory:/docker/abc\n")
    write(tmp_path, "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", f"{2 * GIB}\n")
    write(tmp_path, "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", f"{GIB}\n")
    memory = machine.host_memory(tmp_path)
    assert (memory.total, memory.available, memory.source) == (2 * GIB, GIB, "cgroup v1 limit")


def test_this_cpu_build_reports_no_gpu() -> None:
    assert machine.gpu_devices() == []


def test_the_gpu_question_goes_to_llama_cpps_own_library() -> None:
    # gpu_devices finds llama.cpp's library without importing llama_cpp (start-up cost); an
    # error there reads as "no GPU" (layers stay on the CPU), so check it asks the library
    # llama_cpp itself loads, and gets the same answer.
    import ctypes

    import llama_cpp

    lib = machine._library(machine.llama_lib_dir(), machine.LLAMA_LIBRARIES)
    assert lib is not None
    assert Path(llama_cpp.llama_cpp._lib._name).resolve() == Path(lib._name).resolve()
    lib.llama_supports_gpu_offload.restype = ctypes.c_bool
    assert bool(lib.llama_supports_gpu_offload()) == llama_cpp.llama_supports_gpu_offload()


def test_the_gpu_question_follows_llama_cpp_lib_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LLAMA_CPP_LIB_PATH points llama_cpp at another build (a GPU one beside the bundled CPU
    # build): the fitter must ask that build whether it can offload, not the bundled one.
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(tmp_path))
    assert machine.llama_lib_dir() == tmp_path
