"""The incremental tool-call parser: text and calls, whatever the split of the deltas."""

from __future__ import annotations

import random

import pytest

from lmsp_desktop.core.tools.parser import (
    ArgumentsDelta,
    CallDone,
    CallStarted,
    Event,
    TextDelta,
    ToolCallParser,
)

ARGS = '{"city": "Paris {x} \\"q\\"", "n": [1]}'
CALL = f'<tool_call>\n{{"name": "get_weather", "arguments": {ARGS}}}\n</tool_call>'


def run(chunks: list[str]) -> list[Event]:
    parser = ToolCallParser()
    events: list[Event] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    return events + parser.finish()


def summary(events: list[Event]) -> tuple[str, list[tuple[int, str, str]], list[str]]:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls = [(e.index, e.name, e.arguments) for e in events if isinstance(e, CallDone)]
    streamed = [
        "".join(a.delta for a in events if isinstance(a, ArgumentsDelta) and a.index == i)
        for i, _, _ in calls
    ]
    return text, calls, streamed


@pytest.mark.parametrize(
    ("text", "expected_text", "calls"),
    [
        ("Hello there.\n", "Hello there.\n", []),
        ("  ", "  ", []),
        ("a < b <tool but not a call", "a < b <tool but not a call", []),
        (
            f"Let me look.\n{CALL}",
            "Let me look.",
            [("get_weather", '{"city": "Paris {x} \\"q\\"", "n": [1]}')],
        ),
        (f"{CALL}\n{CALL}\n", "", [("get_weather", '{"city": "Paris {x} \\"q\\"", "n": [1]}')] * 2),
        (
            f"{CALL}\n\nIt is sunny.",
            "It is sunny.",
            [("get_weather", '{"city": "Paris {x} \\"q\\"", "n": [1]}')],
        ),
        ("<tool_call> not json </tool_call> ok", "<tool_call> not json </tool_call> ok", []),
        ('<tool_call>\n{"name": "f", "arguments": {"a": "cut', "", [("f", '{"a": "cut')]),
    ],
)
def test_text_and_calls_whatever_the_split(
    text: str, expected_text: str, calls: list[tuple[str, str]]
) -> None:
    whole = summary(run([text]))
    assert whole[0] == expected_text
    assert [(name, args) for _, name, args in whole[1]] == calls
    assert whole[2] == [args for _, args in calls]  # streamed deltas add up to the arguments
    rng = random.Random(len(text))
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 25))))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert summary(run(chunks)) == whole, chunks


def test_call_is_announced_before_its_arguments_finish() -> None:
    parser = ToolCallParser()
    events = parser.feed('<tool_call>\n{"name": "get_weather", "arguments": {"ci')
    assert events == [CallStarted(0, "get_weather"), ArgumentsDelta(0, '{"ci')]
    assert parser.in_call
    assert parser.feed('ty": "Rome"}}\n</tool_call>') == [
        ArgumentsDelta(0, 'ty": "Rome"}'),
        CallDone(0, "get_weather", '{"city": "Rome"}'),
    ]


def test_resume_rebuilds_the_state_from_the_text_so_far() -> None:
    text = f"Checking.\n{CALL}"
    full = run([text])
    for cut in range(len(text)):
        first = ToolCallParser()
        before = first.feed(text[:cut])
        again = ToolCallParser()
        assert again.feed(text[:cut]) == before  # the replay emits what the first run did
        after = again.feed(text[cut:]) + again.finish()
        assert summary(before + after) == summary(full)
