"""JSON Schema → grammar: keywords the grammar cannot enforce are refused by name."""

from __future__ import annotations

import pytest

from lmsp_desktop.core.tools.schema import UnsupportedSchema, check, enforceable, schema_grammar


@pytest.mark.parametrize(
    ("schema", "param"),
    [
        # Bounds that hold no decimal of up to 8 fraction digits (ranges.FRACTION_DIGITS).
        ({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-9}, "s.exclusiveMinimum"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "s.uniqueItems"),
        ({"properties": {"a": {"type": "number", "multipleOf": 2}}}, "s.properties.a.multipleOf"),
        ({"type": "string", "format": "email"}, "s.format"),
        ({"type": "string", "pattern": "a+"}, "s.pattern"),
        ({"not": {"type": "null"}}, "s.not"),
        ({"$ref": "https://example.com/x.json"}, "s.$ref"),
        ({"anyOf": [{"type": "string"}, {"if": {}}]}, "s.anyOf[1].if"),
        # Longer than llama.cpp's grammar repeats (Claude Code's Workflow tool: 524288).
        ({"type": "string", "maxLength": 524288}, "s.maxLength"),
        ({"type": "array", "items": {"type": "string"}, "minItems": 2001}, "s.minItems"),
        ({"type": "string", "pattern": "^[a-z]{0,5000}$"}, "s.pattern"),
    ],
)
def test_unenforceable_keywords_are_named(schema: dict[str, object], param: str) -> None:
    with pytest.raises(UnsupportedSchema) as info:
        check(schema, "s")
    assert info.value.param == param
    assert info.value.status == 400
    assert f"`{param.rsplit('.', 1)[-1].split('[')[0]}`" in info.value.message


def test_pydantic_style_schema_is_accepted_with_annotations() -> None:
    schema = {
        "title": "Trip",
        "type": "object",
        "$defs": {"Stop": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "properties": {
            "city": {"type": "string", "description": "where", "default": "Paris"},
            "stops": {"type": "array", "items": {"$ref": "#/$defs/Stop"}, "maxItems": 3},
            "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
        },
        "required": ["city", "stops", "when"],
        "additionalProperties": False,
    }
    grammar = schema_grammar(schema)
    assert grammar.startswith("s-") and "\nroot ::= s-root\n" in grammar
    assert '"\\"city\\""' in grammar


def test_strings_in_the_grammar_refuse_raw_control_characters() -> None:
    grammar = schema_grammar({"type": "object", "properties": {"a": {"type": "string"}}})
    assert r's-char ::= [^"\\\x7F\x00-\x1F] |' in grammar


def test_a_loose_schema_loses_only_what_the_grammar_cannot_enforce() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "email": {"type": "string", "format": "email"},
            "n": {"type": "integer", "minimum": 1, "multipleOf": 2},
        },
        "required": ["tags", "n"],
    }
    kept, notes = enforceable(schema, "p")
    assert notes == [
        "p.properties.tags.uniqueItems",
        "p.properties.email.format",
        "p.properties.n.multipleOf",
    ]
    assert kept["properties"] == {
        "tags": {"type": "array", "items": {"type": "string"}},
        "email": {"type": "string"},
        "n": {"type": "integer", "minimum": 1},
    }
    assert kept["required"] == ["tags", "n"]
    assert schema["properties"]["tags"]["uniqueItems"] is True  # the caller's copy is intact


def test_an_empty_schema_accepts_any_value() -> None:
    grammar = schema_grammar({"type": "object", "properties": {"x": {}}, "required": ["x"]})
    assert "\ns-x ::= s-value\n" in grammar


def test_a_long_max_length_is_dropped_from_a_loose_schema() -> None:
    schema = {"type": "object", "properties": {"script": {"type": "string", "maxLength": 524288}}}
    kept, notes = enforceable(schema, "p")
    assert notes == ["p.properties.script.maxLength"]
    assert kept["properties"]["script"] == {"type": "string"}


def test_lengths_are_written_as_gbnf_repetitions() -> None:
    """`{m,n}` for llama.cpp to expand, not the Python converter's nested optionals (which
    llama.cpp refuses past about 1,000); up to 2000 items or characters."""
    grammar = schema_grammar(
        {
            "type": "object",
            "properties": {
                "s": {"type": "string", "minLength": 1, "maxLength": 2000},
                "a": {"type": "array", "items": {"type": "integer"}, "maxItems": 2000},
                "b": {"type": "array", "items": {"type": "integer"}, "minItems": 3},
                "e": {"type": "string", "maxLength": 0},
            },
        }
    )
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    assert rules["s-s"] == '"\\"" s-char{1,2000} "\\"" s-space'
    assert rules["s-a"] == (
        '"[" s-space "]" s-space | "[" s-space s-integer ("," s-space s-integer){0,1999} "]" '
        "s-space"
    )
    assert rules["s-b"] == '"[" s-space s-integer ("," s-space s-integer){2,} "]" s-space'
    assert rules["s-e"] == '"\\"" "\\"" s-space'
    assert "(s-char (s-char" not in grammar
