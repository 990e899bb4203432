"""Stored JSON read back fast (core/storage/events.from_json) gives what json.loads gives."""

from __future__ import annotations

import json

import pytest

from lmsp_desktop.core.storage.events import from_json

SAME_AS_JSON = [
    '{"temperature": 0.7, "top_p": 1.0, "seed": 42, "metadata": {}}',
    # Integers past 64 bits stay exact (orjson would read them as floats).
    '{"tools": [{"parameters": {"maximum": 123456789012345678901234567890}}]}',
    '{"n": -9999999999999999999, "m": 18446744073709551615}',
    # What orjson refuses and json.loads takes: NaN, a lone surrogate escape.
    '{"x": NaN}',
    '{"text": "\\ud800"}',
    '{"text": "a 19-digit run inside a string: 1234567890123456789"}',
]


@pytest.mark.parametrize("text", SAME_AS_JSON)
def test_stored_json_reads_as_json_loads_reads_it(text: str) -> None:
    got, want = from_json(text), json.loads(text)
    assert repr(got) == repr(want)  # repr: 1e+29 != 10**29 is told apart, NaN compared
