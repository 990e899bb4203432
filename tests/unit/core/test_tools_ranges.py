"""Numeric bounds in the grammar: every value the grammar writes lies in the range, and for
integers every value in the range can be written (checked by brute force through a regular
expression made from the GBNF, and by llama.cpp's own grammar parser)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from lmsp_desktop.core.tools.ranges import int_range, number_range
from lmsp_desktop.core.tools.schema import UnsupportedSchema, check, schema_grammar

_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{[^}]*\}|\s+|.')
ZOD_INT = {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991}


def as_regex(gbnf_body: str) -> re.Pattern[str]:
    """The regular expression of a GBNF body made of literals, classes and repetitions."""
    parts = []
    for token in _TOKEN.findall(gbnf_body):
        if token.isspace():
            continue
        parts.append(re.escape(json.loads(token)) if token.startswith('"') else token)
    return re.compile("".join(parts))


@pytest.mark.parametrize(
    ("low", "high"),
    [(0, 10), (1, 9), (-5, 5), (105, None), (None, -7), (None, 33), (-100, -3), (7, 1234),
     (0, None), (None, 0), (19, 20), (99, 101), (-9007199254740991, 9007199254740991)],
)  # fmt: skip
def test_integer_ranges_are_exact(low: int | None, high: int | None) -> None:
    pattern = as_regex(int_range(low, high))
    for n in range(-1100, 1100):
        inside = (low is None or n >= low) and (high is None or n <= high)
        assert bool(pattern.fullmatch(str(n))) is inside, n


def test_zod_int_bounds_reach_the_safe_integers_and_no_further() -> None:
    pattern = as_regex(int_range(-9007199254740991, 9007199254740991))
    assert pattern.fullmatch("9007199254740991") and pattern.fullmatch("-9007199254740991")
    assert not pattern.fullmatch("9007199254740992")
    assert not pattern.fullmatch("10000000000000000")


NUMBERS = [f"{i / 10:.1f}" for i in range(-60, 60)] + [str(i) for i in range(-6, 7)]


@pytest.mark.parametrize(
    "bounds",
    [
        {"minimum": 0, "maximum": 1},
        {"exclusiveMinimum": 0},
        {"minimum": -2.5, "exclusiveMaximum": 3},
        {"maximum": -1.5},
        {"minimum": 0.5},
    ],
)
def test_number_ranges_write_only_values_inside(bounds: dict[str, float]) -> None:
    pattern = as_regex(number_range(bounds))
    written = [v for v in [*NUMBERS, "0.05", "0.95", "-0.0"] if pattern.fullmatch(v)]
    for text in written:
        value = float(text)
        assert value >= bounds.get("minimum", -1e9) and value <= bounds.get("maximum", 1e9)
        assert value > bounds.get("exclusiveMinimum", -1e9)
        assert value < bounds.get("exclusiveMaximum", 1e9)
    assert len(written) > 5  # and a fair share of them can be written


def test_probability_range_keeps_its_fractions() -> None:
    pattern = as_regex(number_range({"minimum": 0, "maximum": 1}))
    assert all(pattern.fullmatch(v) for v in ("0", "1", "0.25", "0.999"))
    assert not any(pattern.fullmatch(v) for v in ("1.5", "2", "-0.1", "1e0"))


def test_bounds_that_leave_no_value_are_refused_by_name() -> None:
    # (Numbers: test_tools_number_grammar.py.)
    with pytest.raises(UnsupportedSchema) as info:
        check({"type": "integer", "minimum": 5, "maximum": 4}, "s")
    assert info.value.param == "s.minimum"
    with pytest.raises(UnsupportedSchema):
        check({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1}, "s")


@pytest.mark.parametrize(
    "schema",
    [
        ZOD_INT,
        {"type": "number", "minimum": 0, "maximum": 1},
        {"type": ["integer", "null"], "exclusiveMinimum": 0},
        {"type": "object", "properties": {"n": ZOD_INT}, "required": ["n"]},
    ],
)
def test_bounded_grammars_parse_in_llama_cpp(schema: dict[str, Any]) -> None:
    from llama_cpp.llama_grammar import LlamaGrammar

    check(schema, "s")
    LlamaGrammar.from_string(schema_grammar(schema), verbose=False)  # raises when invalid
