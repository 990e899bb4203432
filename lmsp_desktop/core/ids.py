"""Opaque prefixed ids and bearer tokens."""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Iterator

TOKEN_PREFIX = "lmsp_"

# Ids take their random bits from a buffer that one os.urandom call fills for ~340 ids,
# not one call each: os.urandom releases the GIL, and in the service each release let a
# database thread take it, so the event loop waited to get it back (B1 at load 11: 55 µs per
# call, two calls per create). The bits are the same kernel CSPRNG output. Tokens, which
# are secrets, still come straight from `secrets`. The buffer is cut into the 24 hex digits
# of one id each when filled, and handed out by a list iterator: its next() is one step
# under the GIL, so no two threads get the same piece, without a lock (B1: the lock, the
# slicing and the .hex() per id were a third of new_id's cost). Two threads refilling at
# once each take from a buffer of their own; the other's rest is dropped, never repeated.
_POOL_BYTES = 4096
_RANDOM_DIGITS = 24  # 96 bits
_pieces: Iterator[str] = iter(())


def _random_hex() -> str:
    """96 random bits as 24 hex digits, never handed out twice in this process."""
    global _pieces
    try:
        return next(_pieces)
    except StopIteration:
        digits = os.urandom(_POOL_BYTES).hex()
        step = _RANDOM_DIGITS
        pieces = iter([digits[at : at + step] for at in range(0, len(digits) - step + 1, step)])
        _pieces = pieces
        return next(pieces)


def _forget_pool() -> None:
    """In a forked child: never hand out the parent's remaining bits a second time."""
    global _pieces
    _pieces = iter(())


os.register_at_fork(after_in_child=_forget_pool)


# An id's hex starts with the milliseconds since 1970 (48 bits: 12 digits, enough until the
# year 10889), then its 96 random bits (24 digits), the same as when ids were all random:
# `resp_0193a3f1c2d48f2a91c0…`. Ids made one after another thus sort together, and a create's
# rows go in at the right-hand end of every B-tree keyed by the id (responses, the tasks'
# id index, task_events), instead of each at a random page: a group of creates dirties a few
# pages, not one per row per tree (B1: half the WAL checkpoints, issue 26). Hex, not base32:
# ids keep the alphabet they had and sort as plain strings. Nothing relies on their order
# (tasks.n is the submission order): a clock stepped back only puts a few rows mid-tree, and
# the random bits alone keep ids unique, across restarts and clock steps alike.
_TIME_MASK = (1 << 48) - 1


def new_id(prefix: str, sep: str = "_") -> str:
    """An opaque id such as `resp_0193a3f1c2d48f2a91c0…`: its time in ms, 96 random bits."""
    ms = time.time_ns() // 1_000_000 & _TIME_MASK
    return f"{prefix}{sep}{ms:012x}{_random_hex()}"


def new_token() -> str:
    """A bearer token with 256 bits of randomness, shown to its owner once."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the database keeps instead of a token. Tokens carry 256 random bits, so a plain
    SHA-256 cannot be brute-forced; no salt or slow hash is needed."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_display_prefix(token: str) -> str:
    """A short non-secret prefix that lets people tell tokens apart: `lmsp_3fa9`."""
    return token[: len(TOKEN_PREFIX) + 4]
