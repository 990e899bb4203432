"""Which sequence of a batched context a new generation uses, so it can start from the
cached KV of a prompt that began the same way (the previous turn, the same system prompt).

A context holds a fixed number of sequences (the model's concurrent requests). A finished
generation leaves its tokens in its sequence; the next generation takes the idle sequence
whose tokens share the longest prefix with its own, else the least recently used one.
Memory is bounded by the sequence count; least recently used contents go first.

Only the part a sequence read as prompt chunks is reused: llama.cpp computes a token read
one at a time (a generated one) with other numerics than a token read in a chunk, so the
previous turn's answer is read again, as part of the next prompt, exactly as a fresh
prompt read would (see llama_batch.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

# A shared prefix shorter than this (a chat template's opening tokens) is not worth keeping
# a more valuable cached conversation from being the one evicted.
MIN_USEFUL_PREFIX = 16


@dataclass
class CachedSequence:
    """One sequence of the context: the tokens its KV cache holds, position by position;
    the first `chunked` of them were read as prompt chunks."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    chunked: int = 0
    last_used: int = 0
    busy: bool = False


@dataclass
class PrefixStats:
    """Counters of one cache; a hit is a prompt that reused at least MIN_USEFUL_PREFIX
    tokens (a shared chat-template opening alone is not one), tokens_reused counts all."""

    lookups: int = 0
    hits: int = 0
    tokens_reused: int = 0
    tokens_evaluated: int = 0  # prompt (and replayed) tokens that had to be evaluated

    def add(self, other: PrefixStats) -> None:
        self.lookups += other.lookups
        self.hits += other.hits
        self.tokens_reused += other.tokens_reused
        self.tokens_evaluated += other.tokens_evaluated


@runtime_checkable
class CachesPrefixes(Protocol):
    """A loaded model with a prompt-prefix cache (the llama engine), for the metrics."""

    @property
    def prefix_stats(self) -> PrefixStats: ...


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reusable(sequence: CachedSequence, tokens: list[int]) -> int:
    """How many leading `tokens` the sequence holds as a fresh prompt read would."""
    return min(common_prefix(sequence.tokens, tokens), sequence.chunked)


class PrefixCache:
    """The sequences of one context and what each holds. Thread-safe (the batching thread
    claims and releases, the event loop reads the statistics)."""

    def __init__(self, n_seq: int) -> None:
        self.sequences = [CachedSequence(i) for i in range(n_seq)]
        self.stats = PrefixStats()
        self._clock = 0
        self._lock = threading.Lock()

    def free_count(self) -> int:
        with self._lock:
            return sum(not s.busy for s in self.sequences)

    def idle_match(self, tokens: list[int]) -> int:
        """The longest useful prefix of `tokens` an idle sequence holds (0 if none)."""
        with self._lock:
            best = max((reusable(s, tokens) for s in self.sequences if not s.busy), default=0)
        return best if best >= MIN_USEFUL_PREFIX else 0

    def claim(
        self, tokens: list[int], *, reuse: bool, limit: int | None = None
    ) -> tuple[CachedSequence, int] | None:
        """An idle sequence for `tokens` and how many leading tokens its cache already holds
        (never all of them: the last one is evaluated again for its logits; at most `limit`);
        None when every sequence is busy. The caller drops the cache past that point."""
        with self._lock:
            idle = [s for s in self.sequences if not s.busy]
            if not idle:
                return None
            self._clock += 1
            self.stats.lookups += 1
            lru = min(idle, key=lambda s: s.last_used)
            chosen, keep = lru, 0
            if reuse:
                best = max(idle, key=lambda s: (reusable(s, tokens), s.last_used))
                best_len = reusable(best, tokens)
                if best_len >= MIN_USEFUL_PREFIX:
                    chosen, keep = best, best_len
                else:
                    keep = reusable(lru, tokens)
            keep = min(keep, len(tokens) - 1, len(tokens) if limit is None else limit)
            keep = max(keep, 0)
            chosen.busy = True
            chosen.last_used = self._clock
            del chosen.tokens[keep:]
            chosen.chunked = keep
            if keep >= MIN_USEFUL_PREFIX:
                self.stats.hits += 1
            self.stats.tokens_reused += keep
            self.stats.tokens_evaluated += len(tokens) - keep
            return chosen, keep

    def release(self, sequence: CachedSequence, evaluated: list[int], chunked: int) -> None:
        """The generation ended; `evaluated` are the tokens now in the sequence's cache, the
        first `chunked` of them read as prompt chunks."""
        with self._lock:
            self._clock += 1
            sequence.tokens = list(evaluated)
            sequence.chunked = min(chunked, len(evaluated))
            sequence.last_used = self._clock
            sequence.busy = False

    def forget(self, sequence: CachedSequence) -> None:
        """The sequence's cache was cleared (an error): it holds nothing reusable."""
        with self._lock:
            sequence.tokens = []
            sequence.chunked = 0
            sequence.busy = False
