"""JSON text read by orjson where it gives what json.loads gives, by json.loads where not:
the one guard for request bodies (service/bodies.py) and stored JSON (responses, events)."""

from __future__ import annotations

import json
from typing import Any

import orjson

# A run of 19 digits may be an integer past 64 bits, which orjson reads as a float (10**30
# became 1e+30 in a stored tool schema; -9999999999999999999 is below -2**63); json.loads
# keeps it exact. Found by mapping every ASCII digit to "0" and the rest to " ", then
# looking for 19 zeros: both in C at memory speed, where re's \d{20} restarted at every
# digit of every shorter run (B1: 1.15 ms for a body of 1,000 floats, 40 us so; B4: 0.9 us
# for a stored ~1 KB request against 3.3 us for re's [0-9][0-9]{18}).
_DIGITS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_LONG_RUN = b"0" * 19


def has_long_number(raw: bytes) -> bool:
    """Whether `raw` holds a run of 19 or more ASCII digits."""
    return _LONG_RUN in raw.translate(_DIGITS)


def from_json(text: str) -> Any:
    """Stored JSON (a request, an error, output items) read back: by orjson, in a fifth of
    json.loads' time (recovery reads 10k requests, B4), unless a run of 19 digits may be an
    integer past 64 bits (orjson would make it a float) or orjson refuses the text (NaN, a
    lone surrogate escape): then by json.loads, so the value is always json.loads'."""
    # surrogatepass: a str holding a lone surrogate still encodes; orjson refuses the bytes.
    raw = text.encode(errors="surrogatepass")
    if not has_long_number(raw):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)
