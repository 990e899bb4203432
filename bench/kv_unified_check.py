"""Whether llama.cpp's unified KV cache (`kv_unified`: one pool of cells shared by every
sequence of a context) keeps a sequence's numerics independent of its neighbours, as exact
resume needs (docs/memory.md, "One KV pool"). With the engine's settings (flash attention
off), a sequence reads an 118-token prompt in two chunks and then 40 tokens one at a time;
the same again with another sequence's tokens in the pool first (shifting this one's cells)
or decoded beside it (interleaving the cells). Prints how many of the 41 logit rows equal
those of the sequence alone, and the largest difference.

    python -m bench.kv_unified_check
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from bench.common import demo_model
from lmsp_desktop.core.engines import llama_native as native

TEXT = "The lighthouse keeper climbed the stairs as the storm rolled in from the sea. " * 20


def _context(model: Any, *, unified: bool, pool: int, threads: int) -> Any:
    lc = native.lowlevel()
    params = lc.llama_context_default_params()
    params.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as the engine runs
    params.n_ctx = pool
    params.n_batch = params.n_ubatch = 512
    params.n_seq_max = 2
    params.n_threads = params.n_threads_batch = threads
    params.kv_unified = unified
    ctx = lc.llama_init_from_model(model, params)
    if not ctx:
        raise SystemExit("llama_init_from_model failed")
    return ctx


def _run(ctx: Any, tokens: list[int], n_vocab: int, *, before: int, beside: bool) -> list[Any]:
    """Logits of sequence 0: its prompt's last row, then each of 40 single tokens. `before`
    tokens of sequence 1 are put in the pool first; `beside`: sequence 1 also gets a token
    in each single-token decode."""
    lc = native.lowlevel()
    lc.llama_memory_clear(lc.llama_get_memory(ctx), True)
    batch = native.TokenBatch(600)
    rows: list[Any] = []

    def decode() -> None:
        if batch.decode(ctx) != 0:
            raise SystemExit("llama_decode failed")

    if before:
        batch.clear()
        for i, token in enumerate(tokens[:before]):
            batch.add(token, i, 1, False)
        decode()
    prompt, generated = tokens[:118], tokens[5:45]
    for start, end in ((0, 60), (60, 118)):
        batch.clear()
        for i in range(start, end):
            batch.add(prompt[i], i, 0, i == end - 1)
        decode()
    rows.append(native.logits_row(ctx, end - start - 1, n_vocab))
    other = before
    for k, token in enumerate(generated):
        batch.clear()
        batch.add(token, 118 + k, 0, True)
        if beside:
            batch.add(tokens[other], other, 1, False)
            other += 1
        decode()
        rows.append(native.logits_row(ctx, 0, n_vocab))
    batch.free()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    lc = native.lowlevel()
    model = native.load_model(demo_model(), lambda _value: None)
    vocab = lc.llama_model_get_vocab(model)
    n_vocab = int(lc.llama_vocab_n_tokens(vocab))
    tokens = native.tokenize(vocab, TEXT, add_bos=True)[:400]
    for unified in (False, True):
        ctx = _context(model, unified=unified, pool=2048 if unified else 4096, threads=args.threads)
        alone = _run(ctx, tokens, n_vocab, before=0, beside=False)
        for before, beside in ((1, False), (3, False), (32, False), (37, False), (0, True)):
            rows = _run(ctx, tokens, n_vocab, before=before, beside=beside)
            same = sum(np.array_equal(a, b) for a, b in zip(alone, rows, strict=True))
            worst = max(float(np.abs(a - b).max()) for a, b in zip(alone, rows, strict=True))
            print(
                f"kv_unified={unified!s:5}  neighbour: {before:2} cells before, "
                f"{'decoded beside' if beside else 'idle          '}  "
                f"equal rows {same}/{len(rows)}  largest difference {worst:.4f}"
            )
        lc.llama_free(ctx)
    lc.llama_model_free(model)


if __name__ == "__main__":
    main()
