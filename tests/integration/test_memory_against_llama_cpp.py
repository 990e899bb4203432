"""The memory estimate's parts against what llama.cpp itself allocates for the demo model at
the service's default settings (8,192 tokens x 4 requests, the engine's own layout of
contexts), read from llama.cpp's load log in a child process (tests/support/llama_sizes.py).
A load is refused or warned about against this estimate (docs/memory.md): each part too
large refuses models that fit, too small lets the OOM killer in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lmsp_desktop.core.engines.base import EMBEDDING_CONTEXT, LoadSettings
from lmsp_desktop.core.engines.llama import LlamaEngine
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta
from lmsp_desktop.core.models.memory import CONTEXT_STEP, ModelShape, estimate

ROOT = Path(__file__).resolve().parents[2]


def llama_sizes(request: dict[str, object]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.llama_sizes", json.dumps(request)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_each_part_of_the_estimate_is_what_llama_cpp_allocates() -> None:
    path = demo_model_path()
    assert path is not None
    shape = ModelShape.from_gguf(read_gguf_meta(path), path.stat().st_size)
    settings = LoadSettings(context_length=8192, parallel=4)
    # Two contexts of 2 sequences, as the service's worker opens them on 2 cores.
    contexts = LlamaEngine(n_threads=1, contexts=2).context_shapes(settings)
    sizes = llama_sizes(
        {
            "model": str(path),
            "contexts": [
                {"n_seq": c.n_seq, "n_ctx_seq": c.n_ctx_seq, "n_batch": c.n_batch} for c in contexts
            ],
            "kv_type": "f16",
            "flash_attn": settings.flash_attn,
            "embedding": EMBEDDING_CONTEXT,
        }
    )
    opened = sizes["contexts"]
    assert isinstance(opened, list) and len(opened) == len(contexts) == 2
    cost = estimate(shape, contexts, "f16")

    # KV cache: llama.cpp's "KV buffer size", 360 MiB a context.
    kv = sum(c["kv"] for c in opened)
    assert abs(cost.kv_cache - kv) <= 0.01 * kv, (cost.kv_cache, kv)

    # Buffers: llama.cpp's "compute buffer size" (166 MiB a context: its peak, the f32
    # attention scores of a 512-row chunk over 8,192 cells and the mask) and "output buffer
    # size", plus the work buffer ggml's CPU backend allocates beside it for the f16 copy of
    # those scores (the log does not show it; an 8,100-token prompt made 226 MiB resident
    # per context, docs/memory.md). The estimate covers them and is not far above.
    work = sum(c.n_batch * c.n_ctx_seq * shape.heads * 2 for c in contexts)
    assert all(c.n_ctx_seq % CONTEXT_STEP == 0 for c in contexts)
    buffers = sum(c["compute"] + c["output"] for c in opened) + work
    assert buffers <= cost.compute <= 1.1 * buffers, (cost.compute, buffers)

    # The load's total is the weights and those: 1.28 GiB, not 2.12 GiB with the embedding
    # context that a model only asked to chat never opens.
    load = shape.file_bytes + kv + buffers
    assert load <= cost.total <= 1.1 * load, (cost.total, load)

    # The embedding context a first embedding opens, counted apart at its largest (2,048
    # tokens): llama.cpp's KV cache and compute buffer, and the output buffer it grows to at
    # the decode, a row of logits and one of embeddings for each of the 2,048 tokens.
    embedding = sizes["embedding"]
    assert isinstance(embedding, dict)
    rows = EMBEDDING_CONTEXT * (shape.vocab + shape.embd) * 4
    allocated = embedding["kv"] + embedding["compute"] + rows
    assert allocated <= cost.embedding <= 1.1 * allocated, (cost.embedding, allocated)
