"""Embeddings with llama.cpp: a context in embedding mode over a loaded model's weights.

Pooling is what the GGUF declares (`<arch>.pooling_type`: mean, cls or last); a decoder-only
model that declares none (or `none`) is mean-pooled, as LMSP_API.md says. Every token of an
input is an output row (as llama-cpp-python's `Llama.embed` marks them), the pooled vector
of each sequence is read with `llama_get_embeddings_seq`, and vectors are L2-normalised, as
OpenAI's are. Several inputs share one decode (a sequence each) while they fit the batch.

The context is opened on the first embedding a loaded model is asked for and kept until the
model is unloaded: a model only used to chat never pays for it, and a client embedding many
chunks does not open a context per call (llama_init_from_model reserves its compute graph).
It is sized by what it has to hold (context_sizes), as llama-server sizes its batch by what
it has to process: its cost grows with its size (a row of logits per token), so a machine
short of memory still embeds short inputs, and it is opened again, larger, only when a
longer input comes.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from lmsp_desktop.core.engines import llama_native as native
from lmsp_desktop.core.engines.base import EMBEDDING_CONTEXT, EMBEDDING_MIN_CONTEXT, EngineError

# llama.cpp's enum llama_pooling_type.
POOLING_NONE, POOLING_MEAN, POOLING_CLS, POOLING_LAST, POOLING_RANK = 0, 1, 2, 3, 4
POOLING_NAMES = {POOLING_MEAN: "mean", POOLING_CLS: "cls", POOLING_LAST: "last"}
# Inputs decoded together at most (sequences of the embedding context).
MAX_SEQUENCES = 16

Vectors = npt.NDArray[np.float32]


def declared_pooling(metadata: dict[str, str]) -> int:
    """The pooling to use: the GGUF's own (mean, cls, last), else mean (decoder-only models
    declare none). A reranker (rank) gives no embeddings: refused."""
    arch = metadata.get("general.architecture", "")
    try:
        declared = int(metadata.get(f"{arch}.pooling_type", POOLING_NONE))
    except ValueError:
        declared = POOLING_NONE
    if declared == POOLING_RANK:
        raise EngineError(
            "embeddings_unsupported",
            "This model is a reranker (its GGUF declares rank pooling): it scores pairs of "
            "texts and gives no embeddings; use an embedding or chat model.",
        )
    return declared if declared in POOLING_NAMES else POOLING_MEAN


def context_limit(context_length: int) -> int:
    """The most tokens an embedding input holds with a model run at `context_length`: its
    context, at most EMBEDDING_CONTEXT, a multiple of 16 (EmbeddingContext)."""
    n_ctx = min(context_length, EMBEDDING_CONTEXT)
    return max(16, n_ctx - n_ctx % 16)


def context_sizes(lengths: list[int], limit: int) -> tuple[int, int]:
    """The embedding context to open for inputs of `lengths` tokens (each at most `limit`):
    the size wanted, holding as many of them as one decode takes (MAX_SEQUENCES), and the
    least size, holding the longest. Powers of two from EMBEDDING_MIN_CONTEXT (a context
    grows a few times at most), never past `limit`."""

    def size(tokens: int) -> int:
        return min(limit, max(EMBEDDING_MIN_CONTEXT, 1 << max(tokens - 1, 0).bit_length()))

    together = sum(sorted(lengths)[-MAX_SEQUENCES:])
    least = size(max(lengths, default=1))
    return max(least, size(min(together, limit))), least


class EmbeddingContext:
    """One llama.cpp context with embeddings on, `n_ctx` tokens shared by up to
    MAX_SEQUENCES inputs per decode. One embedding call at a time (a lock)."""

    def __init__(self, weights: Any, *, n_ctx: int, n_threads: int, pooling: int) -> None:
        lc = native.lowlevel()
        self._lc = lc
        params = lc.llama_context_default_params()
        params.embeddings = True
        params.pooling_type = pooling
        # llama.cpp's pooling aborts the process (GGML_ASSERT in build_pooling) unless the
        # context is a multiple of 16: a context of 1,000 took the worker down at the first
        # embedding, and every generation running in it. Rounded down, at least 16.
        n_ctx = max(16, n_ctx - n_ctx % 16)
        params.n_ctx = n_ctx
        # A pooled input must sit in one micro-batch: the longest input is the context.
        params.n_batch = params.n_ubatch = n_ctx
        params.n_seq_max = MAX_SEQUENCES
        params.kv_unified = True  # the inputs of a decode share the n_ctx tokens
        params.n_threads = params.n_threads_batch = n_threads
        self._ctx = lc.llama_init_from_model(weights, params)
        if not self._ctx:
            raise EngineError(
                "embeddings_unavailable",
                "llama.cpp could not open an embedding context for this model; free memory "
                "or lower its context length, then try again.",
            )
        self.n_ctx = n_ctx
        self.pooling = pooling
        self.dimensions = int(lc.llama_model_n_embd(weights))
        self.n_vocab = int(lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(weights)))
        self._batch = native.TokenBatch(n_ctx)
        self._lock = threading.Lock()

    def embed(self, inputs: list[list[int]], cancel: threading.Event) -> Vectors:
        """One normalised vector per input (rows in input order). Checks `cancel` between
        decodes; raises EngineError("cancelled") when it is set."""
        for n, tokens in enumerate(inputs):
            if not tokens:
                raise EngineError("invalid_request", f"Input {n} has no tokens to embed.")
            if any(not 0 <= token < self.n_vocab for token in tokens):
                raise EngineError(
                    "invalid_input",
                    f"Input {n} holds a token id outside this model's vocabulary (0 to "
                    f"{self.n_vocab - 1}); send token ids of this model's tokenizer, or text.",
                )
            if len(tokens) > self.n_ctx:
                raise EngineError(
                    "context_length_exceeded",
                    f"This model's maximum context length is {self.n_ctx} tokens for an "
                    f"embedding input, but input {n} is {len(tokens)} tokens long; split it "
                    "into shorter pieces.",
                )
        out = np.zeros((len(inputs), self.dimensions), dtype=np.float32)
        with self._lock:
            group: list[int] = []
            used = 0
            for n, tokens in enumerate(inputs):
                if group and (used + len(tokens) > self.n_ctx or len(group) >= MAX_SEQUENCES):
                    self._decode(inputs, group, out, cancel)
                    group, used = [], 0
                group.append(n)
                used += len(tokens)
            self._decode(inputs, group, out, cancel)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)  # L2, as OpenAI's vectors
        return out

    def _decode(
        self, inputs: list[list[int]], group: list[int], out: Vectors, cancel: threading.Event
    ) -> None:
        if cancel.is_set():
            raise EngineError("cancelled", "The embedding was cancelled.")
        lc = self._lc
        lc.llama_memory_clear(lc.llama_get_memory(self._ctx), True)
        self._batch.clear()
        for seq, n in enumerate(group):
            for position, token in enumerate(inputs[n]):
                self._batch.add(token, position, seq, True)
        status = self._batch.decode(self._ctx)
        if status != 0:
            raise EngineError(
                "engine_error", f"llama.cpp could not evaluate the input (llama_decode {status})."
            )
        for seq, n in enumerate(group):
            pointer = lc.llama_get_embeddings_seq(self._ctx, seq)
            if not pointer:
                raise EngineError("engine_error", "llama.cpp returned no pooled embedding.")
            row = ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float))
            out[n] = np.ctypeslib.as_array(row, shape=(self.dimensions,))

    def free(self) -> None:
        self._batch.free()
        self._lc.llama_free(self._ctx)
