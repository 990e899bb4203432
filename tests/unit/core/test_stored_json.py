"""Stored JSON read back fast (core/json_text.from_json) gives what json.loads gives."""

from __future__ import annotations

import json

import pytest

from lmsp_desktop.core.api.resource import build_response
from lmsp_desktop.core.json_text import from_json

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


def test_19_digits_are_found_whatever_surrounds_them() -> None:
    # 18 digits fit 64 bits (orjson's path); 19 ASCII digits anywhere go to json.loads,
    # also when non-ASCII text (Arabic-Indic digits are no JSON digits) is beside them.
    for text in (
        '{"n": 999999999999999999, "m": -999999999999999999}',
        '{"n": -9223372036854775809}',
        '{"s": "\u0661\u0662", "n": 18446744073709551616}',
        "[1.5, 10000000000000000000]",
    ):
        assert repr(from_json(text)) == repr(json.loads(text)), text
    assert from_json('{"n": -9223372036854775809}')["n"] == -(2**63) - 1
    # A lone surrogate held by the str itself (no escape): json.loads' value.
    assert from_json('{"s": "\ud800"}') == {"s": "\ud800"}


def test_a_response_reads_its_stored_row_as_json_loads_would() -> None:
    """What GET /v1/responses/{id} and every event carrying a response are built from: the
    row's request, error and output items, read back fast, give json.loads' values."""
    request = {
        "tools": [{"name": "f", "parameters": {"maximum": 10**30, "minimum": -(10**19)}}],
        "metadata": {"note": "a"},
    }
    # Each in its own column: a lone surrogate sends its whole text to json.loads.
    error = {"code": "server_restarted", "message": "lost \ud800"}
    items = [
        {"type": "message", "id": "msg_1"},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "f",
            "arguments": '{"x": 12345678901234567890}',
            "status": "completed",
        },
    ]
    row = {
        "id": "resp_1",
        "client_id": "client_1",
        "model": "m",
        "state": "failed",
        "on_restart": "fail",
        "mode": "background",
        "created_at": 100,
        "started_at": 101,
        "finished_at": 102,
        "restarts": 0,
        "last_seq": 5,
        "request": json.dumps(request),
        "output_text": "partial",
        "item_id": "msg_1",
        "output_items": json.dumps(items),
        "input_tokens": 3,
        "output_tokens": 1,
        "completed_at": None,
        "error": json.dumps(error),
        "incomplete_reason": None,
    }
    response = build_response(row)
    maximum = response["tools"][0]["parameters"]["maximum"]
    assert repr(maximum) == repr(10**30)  # an int, not 1e+30
    assert repr(response["tools"][0]["parameters"]["minimum"]) == repr(-(10**19))
    assert response["error"] == error and response["task"]["error"] == error
    assert response["output"][1]["arguments"] == '{"x": 12345678901234567890}'
    assert response["output"][0]["content"][0]["text"] == "partial"
