"""Which cached sequence a new prompt takes: the longest shared prefix read as a prompt,
else the least recently used; never all of its tokens; bounded by the sequence count."""

from __future__ import annotations

from lmsp_desktop.core.engines.prefix_cache import MIN_USEFUL_PREFIX, PrefixCache

SYSTEM = list(range(100, 100 + MIN_USEFUL_PREFIX + 4))


def test_the_next_turn_takes_the_sequence_holding_its_conversation() -> None:
    cache = PrefixCache(3)
    turns = [[*SYSTEM, 1, 2, 3], [7] * 30, [8] * 30]
    for tokens in turns:
        claimed = cache.claim(tokens, reuse=True)
        assert claimed is not None
        # The prompt was read in chunks, the two generated tokens one at a time.
        cache.release(claimed[0], [*tokens, 50, 51], chunked=len(tokens))
    claimed = cache.claim([*SYSTEM, 1, 2, 3, 50, 51, 4, 5], reuse=True)
    assert claimed is not None
    sequence, keep = claimed
    # The previous answer (50, 51) is read again as part of this prompt, as a fresh read
    # would: a token read alone has other numerics than one read in a chunk.
    assert sequence.seq_id == 0 and keep == len(SYSTEM) + 3
    assert sequence.tokens == [*SYSTEM, 1, 2, 3]  # the rest was dropped
    assert cache.stats.hits == 1 and cache.stats.tokens_reused == keep
    assert cache.stats.tokens_evaluated == 3 * 30 - 7 + 4  # everything else was evaluated


def test_without_a_useful_match_the_least_recently_used_goes() -> None:
    cache = PrefixCache(2)
    for tokens in ([1] * 20, [2] * 20):
        claimed = cache.claim(tokens, reuse=True)
        assert claimed is not None
        cache.release(claimed[0], tokens, chunked=len(tokens))
    claimed = cache.claim([3] * 20, reuse=True)
    assert claimed is not None and claimed[0].seq_id == 0 and claimed[1] == 0
    cache.release(claimed[0], [3] * 20, chunked=20)
    claimed = cache.claim([4] * 20, reuse=True)
    assert claimed is not None and claimed[0].seq_id == 1  # [2]*20 was the oldest now
    assert cache.stats.hits == 0


def test_an_identical_prompt_reevaluates_its_last_token_for_the_logits() -> None:
    cache = PrefixCache(1)
    claimed = cache.claim(SYSTEM, reuse=True)
    assert claimed is not None
    cache.release(claimed[0], SYSTEM, chunked=len(SYSTEM))
    again = cache.claim(SYSTEM, reuse=True)
    assert again is not None and again[1] == len(SYSTEM) - 1


def test_the_caller_can_cap_the_reuse() -> None:
    # The batch decoder reads at least a prompt's last two tokens again (never a one-token
    # chunk), so it caps the reuse at the prompt's length minus two.
    cache = PrefixCache(1)
    claimed = cache.claim(SYSTEM, reuse=True)
    assert claimed is not None
    cache.release(claimed[0], SYSTEM, chunked=len(SYSTEM))
    again = cache.claim(SYSTEM, reuse=True, limit=len(SYSTEM) - 2)
    assert again is not None and again[1] == len(SYSTEM) - 2
    assert again[0].tokens == SYSTEM[:-2] and again[0].chunked == len(SYSTEM) - 2


def test_busy_sequences_are_never_handed_out_and_reuse_can_be_off() -> None:
    cache = PrefixCache(1)
    first = cache.claim(SYSTEM, reuse=True)
    assert first is not None
    assert cache.claim(SYSTEM, reuse=True) is None  # the only sequence is busy
    cache.release(first[0], SYSTEM, chunked=len(SYSTEM))
    claimed = cache.claim([*SYSTEM, 1], reuse=False)  # a model that failed the probe
    assert claimed is not None and claimed[1] == 0 and claimed[0].tokens == []
