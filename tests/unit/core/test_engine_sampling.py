"""Sampling is a function of (seed, position) and UTF-8 text is never split mid-character."""

from __future__ import annotations

import numpy as np

from lmsp_desktop.core.engines.sampling import Utf8Stream, new_seed, sample_token


def _logits(seed: int = 0, size: int = 500) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=size).astype(np.float32)


def test_temperature_zero_is_greedy_argmax() -> None:
    logits = _logits()
    for seed in (1, 2, 3):
        token = sample_token(logits, temperature=0.0, top_p=0.9, seed=seed, position=seed)
        assert token == int(np.argmax(logits))


def test_same_seed_and_position_give_the_same_token() -> None:
    logits = _logits()
    first = [
        sample_token(logits, temperature=1.0, top_p=1.0, seed=7, position=p) for p in range(50)
    ]
    again = [
        sample_token(logits, temperature=1.0, top_p=1.0, seed=7, position=p) for p in range(50)
    ]
    assert first == again
    # Randomness really depends on the position and on the seed.
    assert len(set(first)) > 5
    other = [
        sample_token(logits, temperature=1.0, top_p=1.0, seed=8, position=p) for p in range(50)
    ]
    assert other != first


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = np.full(100, -10.0, dtype=np.float32)
    logits[[3, 42]] = [5.0, 4.0]  # together hold > 99.9 % of the mass
    picks = {
        sample_token(logits, temperature=1.0, top_p=0.9, seed=s, position=0) for s in range(200)
    }
    assert picks <= {3, 42}
    assert picks == {3, 42}
    only_top = {
        sample_token(logits, temperature=1.0, top_p=0.5, seed=s, position=0) for s in range(50)
    }
    assert only_top == {3}


def test_top_k_draws_among_the_k_most_likely_only() -> None:
    logits = _logits(4)
    best = set(np.argsort(-logits)[:3].tolist())
    picks = {
        sample_token(logits, temperature=2.0, top_p=1.0, top_k=3, seed=s, position=0)
        for s in range(300)
    }
    assert picks == best
    one = {
        sample_token(logits, temperature=2.0, top_p=1.0, top_k=1, seed=s, position=0)
        for s in range(30)
    }
    assert one == {int(np.argmax(logits))}
    free = {
        sample_token(logits, temperature=2.0, top_p=1.0, top_k=None, seed=s, position=0)
        for s in range(300)
    }
    assert len(free) > 20  # without top_k the same draws spread far wider


def test_low_temperature_sharpens_towards_the_argmax() -> None:
    logits = _logits(3)
    cold = [
        sample_token(logits, temperature=0.05, top_p=1.0, seed=s, position=0) for s in range(30)
    ]
    assert set(cold) == {int(np.argmax(logits))}


def test_new_seed_fits_31_bits() -> None:
    seeds = {new_seed() for _ in range(20)}
    assert all(0 <= s < 2**31 for s in seeds)
    assert len(seeds) > 1


def test_multibyte_character_split_across_tokens_comes_out_whole() -> None:
    data = "é€😀".encode()
    stream = Utf8Stream()
    pieces = [stream.feed(data[i : i + 1]) for i in range(len(data))]
    assert "".join(pieces) == "é€😀"
    assert all(p in ("", "é", "€", "😀") for p in pieces)


def test_primed_stream_completes_a_character_split_at_the_resume_point() -> None:
    data = "a😀".encode()
    stream = Utf8Stream()
    stream.prime(data[:3])  # "a" and half of the emoji were reported by the earlier run
    assert stream.feed(data[3:]) == "😀"


def _old_sample_token(
    logits: np.ndarray,
    *,
    temperature: float,
    top_p: float,
    seed: int,
    position: int,
    sorted_: tuple[np.ndarray, np.ndarray] | None = None,
) -> int:
    """The sampler as it was before the partial selection (a verbatim copy): the fast path
    must pick the very same token for every (seed, position), or resumes would diverge.
    `sorted_` is `_old_sorted(logits, temperature)` when the caller already has it: the
    whole vocabulary's sort, which depends on neither top_p, seed nor position, is the
    copy's cost (a 151,936-token sort for each of the test's 1,152 draws)."""
    from lmsp_desktop.core.engines.sampling import rng_for

    if temperature <= 0.0:
        return int(np.argmax(logits))
    probs, order = sorted_ if sorted_ is not None else _old_sorted(logits, temperature)
    sorted_probs = probs[order]
    if 0.0 < top_p < 1.0:
        cumulative = np.cumsum(sorted_probs)
        keep = int(np.searchsorted(cumulative, top_p, side="left")) + 1
        keep = min(max(keep, 1), len(order))
        order = order[:keep]
        sorted_probs = sorted_probs[:keep]
    cumulative = np.cumsum(sorted_probs)
    draw = rng_for(seed, position).random() * cumulative[-1]
    index = int(np.searchsorted(cumulative, draw, side="right"))
    return int(order[min(index, len(order) - 1)])


def _old_sorted(logits: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """The copy's probabilities and its stable sort of them (verbatim, as above)."""
    scaled = logits.astype(np.float64) / temperature
    scaled -= scaled.max()
    probs = np.exp(scaled)
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    return probs, order


def test_partial_selection_picks_exactly_what_the_full_sort_picked() -> None:
    rng = np.random.default_rng(11)
    checked = 0
    for case in range(24):
        size = int(rng.choice([50, 700, 49_152, 151_936]))
        scale = float(rng.choice([0.5, 2.0, 8.0]))  # flat to peaked distributions
        logits = (rng.normal(size=size) * scale).astype(np.float32)
        if case % 5 == 0:
            logits[rng.integers(0, size, size=size // 3)] = logits[0]  # many exact ties
        for temperature in (0.0, 0.3, 0.8, 1.5):
            # The old sampler's sort, once for the twelve draws below that share it.
            sorted_ = _old_sorted(logits, temperature) if temperature > 0.0 else None
            for top_p in (0.05, 0.5, 0.9, 0.95, 0.999, 1.0):
                args = {"temperature": temperature, "top_p": top_p}
                for position in (0, case):
                    new = sample_token(logits, seed=case, position=position, **args)
                    old = _old_sample_token(
                        logits, seed=case, position=position, sorted_=sorted_, **args
                    )
                    assert new == old, (case, size, temperature, top_p, position)
                    checked += 1
    assert checked == 24 * 4 * 6 * 2
