"""The exactness probe: whether a model's numerics allow what the batch decoder does in
exact mode (llama_batch.py), run once per load before the first generation (docs/prefill.md)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from lmsp_desktop.core.engines.llama_native import TokenBatch, logits_row, lowlevel


def probe_exactness(ctx: Any, vocab: Any, n_seq: int, tokens: list[int], threads: int) -> bool:
    """Whether this model's numerics allow what the batch decoder does in exact mode: the
    logits after `tokens` read as one chunk on one thread equal those after the same tokens
    read as two chunks of other sizes on `threads` threads, and the next token's logits,
    read alone, do not change when another sequence's token shares its decode."""
    lc = lowlevel()
    memory = lc.llama_get_memory(ctx)
    n_vocab = int(lc.llama_vocab_n_tokens(vocab))
    batch = TokenBatch(len(tokens) + 2)
    prompt, last = tokens[:-1], tokens[-1]

    def read(parts: list[list[int]], n_threads: int) -> tuple[Any, Any]:
        lc.llama_memory_clear(memory, False)
        lc.llama_set_n_threads(ctx, n_threads, n_threads)
        start = 0
        for part in parts:
            batch.clear()
            for i, token in enumerate(part):
                batch.add(token, start + i, 0, i == len(part) - 1)
            decode()
            start += len(part)
        read_logits = logits_row(ctx, len(parts[-1]) - 1, n_vocab)
        lc.llama_set_n_threads(ctx, 1, 1)
        batch.clear()
        batch.add(last, len(prompt), 0, True)
        if n_seq > 1 and parts != [prompt]:
            batch.add(tokens[0], 0, 1, True)  # a neighbour in the same decode
        decode()
        return read_logits, logits_row(ctx, 0, n_vocab)

    def decode() -> None:
        if batch.decode(ctx) != 0:
            raise RuntimeError("llama_decode failed in the exactness probe")

    try:
        whole, whole_next = read([prompt], 1)
        split, split_next = read([prompt[:3], prompt[3:]], threads)
        return bool(np.array_equal(whole, split) and np.array_equal(whole_next, split_next))
    finally:
        lc.llama_memory_clear(memory, False)
        batch.free()


class Verdict:
    """The exactness probe's answer, set once by the thread that runs it."""

    def __init__(self) -> None:
        self._known = threading.Event()
        self._exact = False

    def set(self, exact: bool) -> None:
        self._exact = exact
        self._known.set()

    def wait(self) -> bool:
        self._known.wait()
        return self._exact

    def known(self) -> bool | None:
        """The answer if the probe has run (or it was given), else None; never waits."""
        return self._exact if self._known.is_set() else None
