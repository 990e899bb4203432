"""The llama engine's layout rule: which contexts a load with given settings opens.

Apart from core/engines/llama.py, which imports llama.cpp and numpy (~0.3 s): the memory
estimate (`models list`, the service's fitter, a worker engine's owner) asks this rule
without loading anything, so it must not pay for them. LlamaEngine inherits it: one rule.
"""

from __future__ import annotations

import dataclasses
import os

from lmsp_desktop.core.engines.base import ContextShape, LoadSettings

DEFAULT_CONTEXT = 4096
DEFAULT_THREADS = 2
DEFAULT_PARALLEL = 4  # concurrent requests per loaded model


class LlamaLayout:
    """The llama engine's settings and the contexts they open. `n_ctx` caps each
    sequence's context (the model's own training context is used when it is smaller);
    `n_threads` is each context's thread count (a prompt read while the model's other
    contexts are idle uses every core); `n_batch` is the most prompt tokens one decode
    reads; `parallel` is how many requests one loaded model serves at once."""

    def __init__(
        self,
        n_ctx: int = DEFAULT_CONTEXT,
        n_threads: int = DEFAULT_THREADS,
        n_batch: int = 512,
        parallel: int = DEFAULT_PARALLEL,
        contexts: int | None = None,
        contexts_on_demand: bool = False,
    ) -> None:
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.n_batch = n_batch
        self.parallel = parallel
        # How many contexts (decoding threads) share the weights; None: by the cores.
        self.contexts = contexts
        # Open the first context at load and each other one when a request finds every open
        # one busy (the service's workers): llama.cpp clears a context's whole KV cache when
        # it opens it, which a model never asked for two requests at once never needs.
        self.contexts_on_demand = contexts_on_demand

    def _complete(self, settings: LoadSettings | None) -> LoadSettings:
        """`settings` with the engine's defaults for what it leaves open."""
        settings = settings or LoadSettings()
        return dataclasses.replace(
            settings,
            context_length=settings.context_length or self.n_ctx,
            parallel=max(1, settings.parallel or self.parallel),
        )

    def context_shapes(self, settings: LoadSettings) -> list[ContextShape]:
        """The contexts a load with `settings` opens (sequences each, tokens per sequence,
        batch size): the one rule both the load and the memory estimate follow. The
        context is taken as given: the caller caps it at the trained length."""
        settings = self._complete(settings)
        assert settings.parallel is not None and settings.context_length is not None
        layout = context_layout(
            settings.parallel, self.n_threads, os.cpu_count() or 1, self.contexts
        )
        return [
            # What one decode can hold: a prompt chunk, or one token of each sequence.
            ContextShape(n_seq, settings.context_length, max(self.n_batch, n_seq))
            for n_seq in layout
        ]


def context_layout(
    parallel: int, threads: int, cores: int, contexts: int | None = None
) -> list[int]:
    """How many sequences each context (each with its own decoding thread) holds.

    On this CPU a decode costs about the same per sequence whether sequences share it or
    not (bench/engine_choice.py), so concurrent requests gain only from more cores: as many
    contexts as the cores hold `threads`-thread decoders (today's lanes used that many
    cores too), each batching its share of the sequences. One context where the threads
    already take the cores. Two threads in one context under load ran 5x slower than two
    single-thread contexts (measured), which is why the cores are split this way."""
    count = contexts or max(1, min(parallel, cores // max(1, threads)))
    count = min(count, parallel)
    base, extra = divmod(parallel, count)
    return [base + (1 if i < extra else 0) for i in range(count)]
