"""Token sampling whose randomness is a function of (seed, position), so resumes replay it."""

from __future__ import annotations

import codecs
import secrets

import numpy as np
import numpy.typing as npt

# Seeds are kept below 2**31 so they survive JSON clients and SQLite integers untouched.
SEED_BITS = 31
_SEED_MASK = (1 << 64) - 1


def new_seed() -> int:
    """A fresh random seed for a request that did not name one (stored for resumes)."""
    return secrets.randbits(SEED_BITS)


def rng_for(seed: int, position: int) -> np.random.Generator:
    """The random generator for output position `position`: depends on nothing else, so a
    resumed run draws exactly what an uninterrupted run drew at the same position."""
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([seed & _SEED_MASK, position]))
    )


# First candidate-set size for nucleus sampling; widened ×4 until it holds top_p of the mass.
FIRST_CANDIDATES = 64


def sample_token(
    logits: npt.NDArray[np.floating],
    *,
    temperature: float,
    top_p: float,
    seed: int,
    position: int,
    top_k: int | None = None,
) -> int:
    """Pick the next token: greedy argmax at temperature 0, else nucleus (top_p) sampling of
    softmax(logits / temperature) with one uniform draw from rng_for(seed, position). With
    `top_k`, only the k most likely tokens (and any tied with the k-th) can be drawn.

    The token is exactly the one the original definition picks (sort the whole vocabulary
    by probability, ties in token-id order, keep the smallest prefix whose mass reaches
    top_p, draw within it), without sorting the whole vocabulary: only the most likely
    candidates are sorted, a set widened until it holds top_p of the mass. A prefix of the
    sorted order and its running sums are the same whether the rest was sorted or not, so
    the draw lands on the same token. top_p = 1 keeps the full sort (see below).
    """
    if temperature <= 0.0:
        return int(np.argmax(logits))
    if top_k is not None and 0 < top_k < len(logits):
        kth = np.partition(logits, len(logits) - top_k)[len(logits) - top_k]
        logits = np.where(logits >= kth, logits, -np.inf)
    probs = _probabilities(logits, temperature)
    n = len(probs)
    if not 0.0 < top_p < 1.0:
        # Every token is kept: the draw is scaled by the whole sorted mass, whose rounding
        # depends on the full order, so this case keeps the full sort.
        return _draw(probs, np.argsort(-probs, kind="stable"), seed, position)
    k = FIRST_CANDIDATES
    while k < n:
        # Every token at least as likely as the k-th most likely one (ties included, so the
        # set is a true prefix of the stable order), in token-id order.
        threshold = np.partition(probs, n - k)[n - k]
        candidates = np.flatnonzero(probs >= threshold)
        order = candidates[np.argsort(-probs[candidates], kind="stable")]
        cumulative = np.cumsum(probs[order])
        if cumulative[-1] >= top_p:
            return _nucleus_draw(probs, order, cumulative, top_p, seed, position)
        k *= 4
    order = np.argsort(-probs, kind="stable")
    return _nucleus_draw(probs, order, np.cumsum(probs[order]), top_p, seed, position)


def _probabilities(logits: npt.NDArray[np.floating], temperature: float) -> npt.NDArray[np.float64]:
    scaled = logits.astype(np.float64) / temperature
    scaled -= scaled.max()
    probs = np.exp(scaled)
    probs /= probs.sum()
    return probs


def _nucleus_draw(
    probs: npt.NDArray[np.float64],
    order: npt.NDArray[np.intp],
    cumulative: npt.NDArray[np.float64],
    top_p: float,
    seed: int,
    position: int,
) -> int:
    # Smallest prefix whose mass reaches top_p (at least one token).
    keep = int(np.searchsorted(cumulative, top_p, side="left")) + 1
    keep = min(max(keep, 1), len(order))
    return _draw(probs, order[:keep], seed, position)


def _draw(
    probs: npt.NDArray[np.float64], order: npt.NDArray[np.intp], seed: int, position: int
) -> int:
    cumulative = np.cumsum(probs[order])
    draw = rng_for(seed, position).random() * cumulative[-1]
    index = int(np.searchsorted(cumulative, draw, side="right"))
    return int(order[min(index, len(order) - 1)])


class Utf8Stream:
    """Turns token bytes into text without splitting multi-byte characters across pieces.

    A character whose bytes span several tokens comes out with the token that completes it;
    `prime` feeds bytes of replayed tokens (exact resume) so a character split at the
    snapshot boundary is completed correctly.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def prime(self, data: bytes) -> None:
        # The text of replayed tokens was already reported by the earlier run: drop it.
        self._decoder.decode(data)

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data)
