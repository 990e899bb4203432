"""Opaque prefixed ids and bearer tokens."""

from __future__ import annotations

import hashlib
import os
import secrets
import threading

TOKEN_PREFIX = "lmsp_"

# Ids take their random bits from a buffer that one os.urandom call fills for ~340 ids,
# not one call each: os.urandom releases the GIL, and in the service each release let a
# database thread take it, so the event loop waited to get it back (B1 at load 11: 55 µs per
# call, two calls per create). The bits are the same kernel CSPRNG output. Tokens, which
# are secrets, still come straight from `secrets`.
_POOL_BYTES = 4096
_pool = b""
_taken = 0
_pool_lock = threading.Lock()


def _random_bytes(n: int) -> bytes:
    global _pool, _taken
    with _pool_lock:
        if _taken + n > len(_pool):
            _pool, _taken = os.urandom(_POOL_BYTES), 0
        chunk = _pool[_taken : _taken + n]
        _taken += n
    return chunk


def _forget_pool() -> None:
    """In a forked child: never hand out the parent's remaining bytes a second time."""
    global _pool, _taken
    _pool, _taken = b"", 0


os.register_at_fork(after_in_child=_forget_pool)


def new_id(prefix: str) -> str:
    """An opaque id such as `resp_3f9a…`: 96 random bits in hex."""
    return f"{prefix}_{_random_bytes(12).hex()}"


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
