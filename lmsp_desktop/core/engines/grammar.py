"""A GBNF grammar constraint over llama.cpp's own grammar sampler, for our own sampler.

The engine samples with core/engines/sampling.py (randomness a function of seed and
position, so a resumed run draws what the first run drew). The grammar only says which
tokens are allowed. As llama.cpp's common sampler does, the sampled token is checked first
(one candidate: cheap) and the whole vocabulary is constrained only when that token is
rejected; the constrained logits are then sampled again with the same (seed, position)
randomness, so the choice stays reproducible. A resumed run rebuilds the grammar state by
accepting the replayed tokens in order (`replay`).
"""

from __future__ import annotations

import ctypes
import importlib
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from lmsp_desktop.core.engines.base import EngineError

# llama.cpp's llama_token_data {int32 id; float logit; float p}: 12 bytes, no padding.
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])

Logits = npt.NDArray[np.float32]
# Candidates a greedy step looks at before it masks the whole vocabulary.
TOP_K = 64


def _lowlevel() -> Any:
    return importlib.import_module("llama_cpp.llama_cpp")


class GrammarConstraint:
    """The grammar state of one generation (not thread-safe; one per token loop).

    `vocab` is the model's `llama_vocab` pointer and `n_vocab` its size. Raises EngineError
    `invalid_grammar` when llama.cpp cannot parse the grammar.
    """

    def __init__(self, vocab: Any, n_vocab: int, gbnf: str, root: str = "root") -> None:
        self._lc = _lowlevel()
        self._sampler: Any = self._lc.llama_sampler_init_grammar(
            vocab, gbnf.encode("utf-8"), root.encode("utf-8")
        )
        if not self._sampler:
            raise EngineError(
                "invalid_grammar",
                "llama.cpp could not parse the output grammar built for this request.",
            )
        self._n_vocab = n_vocab
        # One-candidate array for the cheap check, and a whole-vocabulary one for masking;
        # both reused for every token.
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        self._one_array = self._token_array(self._one)
        self._all = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._all["id"] = np.arange(n_vocab, dtype=np.int32)
        self._all_array = self._token_array(self._all)
        # Counters for the benchmark and tests: how often the cheap check sufficed.
        self.checked = 0
        self.masked = 0
        # Freed with the object, so a token loop needs no cleanup code of its own.
        self._finalizer = weakref.finalize(self, self._lc.llama_sampler_free, self._sampler)

    def _token_array(self, data: npt.NDArray[Any]) -> Any:
        pointer = ctypes.cast(data.ctypes.data, self._lc.llama_token_data_p)
        return self._lc.llama_token_data_array(
            data=pointer, size=len(data), selected=-1, sorted=False
        )

    def allows(self, token: int) -> bool:
        """Whether the grammar accepts `token` next (end-of-generation only once complete)."""
        self._one[0] = (token, 0.0, 0.0)
        self._one_array.size = 1
        self._lc.llama_sampler_apply(self._sampler, ctypes.byref(self._one_array))
        return bool(np.isfinite(self._one["logit"][0]))

    def mask(self, logits: Logits) -> Logits:
        """A copy of `logits` with every token the grammar rejects set to -inf."""
        self._all["logit"] = logits[: self._n_vocab]
        self._all["p"] = 0.0
        self._all_array.size = self._n_vocab
        self._all_array.selected = -1
        self._all_array.sorted = False
        self._lc.llama_sampler_apply(self._sampler, ctypes.byref(self._all_array))
        # The sampler may have reordered nothing (it only writes logits), but read by id to
        # stay correct should a later llama.cpp sort the array.
        masked = np.full(len(logits), -np.inf, dtype=np.float32)
        masked[self._all["id"]] = self._all["logit"]
        return masked

    def best_allowed(self, logits: Logits) -> int | None:
        """The highest-logit token the grammar allows among the top TOP_K, or None. For
        greedy decoding this is exactly the argmax of the fully masked logits, at a
        fraction of the cost of masking the whole vocabulary."""
        top = np.argpartition(-logits, TOP_K)[:TOP_K]
        top = top[np.argsort(-logits[top], kind="stable")]
        data = self._all[:TOP_K]
        data["id"] = top
        data["logit"] = logits[top]
        self._all_array.size = TOP_K
        self._all_array.selected = -1
        self._all_array.sorted = False
        self._lc.llama_sampler_apply(self._sampler, ctypes.byref(self._all_array))
        allowed = np.flatnonzero(np.isfinite(data["logit"]))
        best = int(data["id"][allowed[0]]) if len(allowed) else None
        self._all["id"][:TOP_K] = np.arange(TOP_K, dtype=np.int32)  # restore the full array
        return best

    def choose(
        self, logits: Logits, sample: Callable[[Logits], int], *, greedy: bool = False
    ) -> int:
        """Sample with `sample`; if the grammar rejects that token, sample again from the
        logits the grammar allows (the same randomness, so the choice is reproducible).
        `greedy` (temperature 0) looks among the top candidates before masking everything."""
        token = sample(logits)
        if self.allows(token):
            self.checked += 1
            return token
        self.masked += 1
        if greedy and (best := self.best_allowed(logits)) is not None:
            return best
        masked = self.mask(logits)
        if not np.isfinite(masked).any():
            raise EngineError(
                "grammar_dead_end",
                "The output grammar allows no further token; this is a bug in the grammar "
                "built for the request.",
            )
        return sample(masked)

    def accept(self, token: int) -> None:
        """Advance the grammar past `token` (which it must allow; end-of-turn is not fed)."""
        self._lc.llama_sampler_accept(self._sampler, token)

    def replay(self, tokens: Iterable[int]) -> None:
        """Rebuild the state after tokens generated earlier under this same grammar.

        Each token is checked before it is fed: llama.cpp aborts the process on a token its
        grammar rejects, and a snapshot from another grammar must fail the task instead."""
        for position, token in enumerate(tokens):
            if not self.allows(token):
                raise EngineError(
                    "resume_mismatch",
                    f"Token {position} of the snapshot does not fit the request's output "
                    "grammar; the task cannot be resumed exactly.",
                )
            self.accept(token)

    def close(self) -> None:
        self._finalizer()


def open_constraint(
    vocab: Any, n_vocab: int, gbnf: str | None, resume_tokens: Iterable[int] = ()
) -> GrammarConstraint | None:
    """The constraint for a request's grammar, its state rebuilt after `resume_tokens`; None
    when the request has no grammar (free decoding)."""
    if not gbnf:
        return None
    constraint = GrammarConstraint(vocab, n_vocab, gbnf)
    constraint.replay(resume_tokens)
    return constraint


def pick(
    constraint: GrammarConstraint | None,
    logits: Logits,
    sample: Callable[[Logits], int],
    *,
    greedy: bool = False,
) -> int:
    """The next token: `sample(logits)`, checked against the grammar when there is one."""
    if constraint is None:
        return sample(logits)
    return constraint.choose(logits, sample, greedy=greedy)


def advance(constraint: GrammarConstraint | None, token: int) -> None:
    """Feed an emitted token to the grammar (no-op without one)."""
    if constraint is not None:
        constraint.accept(token)
