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


def sample_token(
    logits: npt.NDArray[np.floating],
    *,
    temperature: float,
    top_p: float,
    seed: int,
    position: int,
) -> int:
    """Pick the next token: greedy argmax at temperature 0, else nucleus (top_p) sampling of
    softmax(logits / temperature) with one uniform draw from rng_for(seed, position)."""
    if temperature <= 0.0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / temperature
    scaled -= scaled.max()
    probs = np.exp(scaled)
    probs /= probs.sum()
    # A stable sort keeps ties in token-id order, so the draw is reproducible across runs.
    order = np.argsort(-probs, kind="stable")
    sorted_probs = probs[order]
    if 0.0 < top_p < 1.0:
        cumulative = np.cumsum(sorted_probs)
        # Smallest prefix whose mass reaches top_p (at least one token).
        keep = int(np.searchsorted(cumulative, top_p, side="left")) + 1
        keep = min(max(keep, 1), len(order))
        order = order[:keep]
        sorted_probs = sorted_probs[:keep]
    cumulative = np.cumsum(sorted_probs)
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
