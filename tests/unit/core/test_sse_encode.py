"""The SSE bytes of one event: what a client's parser reads back."""

from __future__ import annotations

import json

from lmsp_desktop.core.service.sse import encode


def read_back(raw: bytes) -> tuple[str, str, dict]:
    """One SSE event as a client parses it: its id, its event name and its data's JSON."""
    text = raw.decode()
    assert text.endswith("\n\n") and text.count("\n\n") == 1  # one event, whole
    fields = dict(line.split(": ", 1) for line in text[:-2].split("\n"))
    assert list(fields) == ["id", "event", "data"]  # one data line: nothing split it
    return fields["id"], fields["event"], json.loads(fields["data"])


def test_a_delta_with_newlines_and_non_ascii_text_reads_back_as_it_was() -> None:
    event = {
        "type": "response.output_text.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": 'Zoë said "hi"\n\tthen\u2028left \U0001f600 \x00\x7f',
        "sequence_number": 42,
    }
    raw = encode(event)
    assert read_back(raw) == ("42", "response.output_text.delta", event)
    assert "Zoë".encode() in raw  # UTF-8 as it is, not \u escapes


def test_an_integer_past_64_bits_still_streams() -> None:
    # A tool's schema may hold one; orjson refuses it, the event must still go out.
    event = {"type": "response.created", "sequence_number": 0, "response": {"n": 10**30}}
    assert read_back(encode(event)) == ("0", "response.created", event)
