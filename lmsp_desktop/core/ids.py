"""Opaque prefixed ids and bearer tokens."""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "lmsp_"


def new_id(prefix: str) -> str:
    """An opaque id such as `resp_3f9a…`: 96 random bits in hex."""
    return f"{prefix}_{secrets.token_hex(12)}"


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
