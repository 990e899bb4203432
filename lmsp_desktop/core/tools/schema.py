"""JSON Schema → GBNF through llama.cpp's converter (llama-cpp-python's `llama_grammar`).

The converter silently ignores keywords it cannot express (`minimum`, `uniqueItems`, …), so
a grammar built from such a schema would let through output the schema forbids. `check`
walks the schema first and names the first keyword the converter would ignore; callers
turn that into a 400 that names it. `GrammarBuilder` merges several schemas (one per tool)
into one grammar, each under its own rule prefix.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from typing import Any

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.tools.ranges import BOUNDS, in_range, int_range, number_range, whole_bounds

# Keywords llama-cpp-python's SchemaConverter turns into grammar rules.
STRUCTURAL = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems",
        "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
        "definitions", "pattern", "format", "minLength", "maxLength", *BOUNDS,
    }
)  # fmt: skip
# Keywords that say nothing about which values are valid.
ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "$schema", "$id", "$comment",
        "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
    }
)  # fmt: skip
# String formats the converter has rules for (others would accept any string).
FORMATS = frozenset({"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4"})
TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
# llama.cpp's grammar parser repeats an item at most this many times (MAX_REPETITION_THRESHOLD
# in llama-grammar.cpp; a larger maximum it quietly treats as unbounded, a larger minimum it
# refuses). A longer minLength / maxLength / minItems / maxItems, or a pattern quantifier
# past it, is a keyword the grammar cannot enforce. (Claude Code's Workflow tool has
# `maxLength: 524288`: written out, that grammar crashed the engine.)
MAX_REPETITION = 2000
# A pattern's {m,n} the Python converter writes out as nested optionals, which llama.cpp
# refuses from about 1,100 deep (measured: `^[a-z]{0,1000}$` parses, `{0,1100}` does not).
MAX_PATTERN_REPETITION = 1000
LENGTHS = ("minLength", "maxLength", "minItems", "maxItems")
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")
# Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
_SCHEMA = ("items", "additionalProperties")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions")

# llama.cpp's C++ converter forbids raw control characters inside strings (JSON does too);
# the Python port allows them, and `json.loads` would then refuse the output.
_PY_CHAR_CLASS = r'[^"\\] |'
_JSON_CHAR_CLASS = r'[^"\\\x7F\x00-\x1F] |'


class UnsupportedSchema(LmspError):
    """A schema keyword the grammar cannot express (400, `param` is the keyword's path)."""

    def __init__(self, keyword: str, path: str, why: str = "") -> None:
        reason = why or "the output grammar cannot enforce it"
        super().__init__(
            f"The JSON Schema keyword `{keyword}` at {path} is not supported: {reason}. "
            "Remove it (or express the constraint with enum, pattern, minLength/maxLength "
            "or minItems/maxItems).",
            code="unsupported_schema",
            param=path,
            status=400,
        )


def unenforced_note(paths: list[str]) -> str:
    """The task's note naming the keywords left out of non-strict schemas' grammars."""
    return (
        "Not enforced by the output grammar (left out of a non-strict schema): "
        + ", ".join(paths)
        + "."
    )


def check(schema: Any, path: str) -> None:
    """Raise UnsupportedSchema for the first keyword the grammar would not enforce (a strict
    schema, or any structured-output schema sent with `strict`)."""
    _enforceable(schema, path, None)


def enforceable(schema: Any, path: str) -> tuple[Any, list[str]]:
    """A non-strict schema with every keyword the grammar cannot enforce dropped, and the
    paths of the dropped keywords (for the task's notes). Malformed schemas still raise."""
    notes: list[str] = []
    return _enforceable(schema, path, notes), notes


def _enforceable(schema: Any, path: str, notes: list[str] | None) -> Any:
    """`schema` without the keywords the grammar cannot enforce: each raises when `notes` is
    None (strict), else is dropped and its path appended to `notes`."""

    def unsupported(keyword: str, where: str, why: str = "") -> None:
        if notes is None:
            raise UnsupportedSchema(keyword, where, why)
        notes.append(where)

    if isinstance(schema, bool):
        if schema is False:
            unsupported("false", path, "a schema that accepts nothing")
        return {}
    if not isinstance(schema, dict):
        raise LmspError(
            f"{path} must be a JSON Schema object.", code="invalid_value", param=path, status=400
        )
    out: dict[str, Any] = {}
    for key, value in schema.items():
        where = f"{path}.{key}"
        if key in ANNOTATIONS:
            out[key] = value
        elif key not in STRUCTURAL:
            unsupported(key, where)
        elif key == "type":
            kinds = value if isinstance(value, list) else [value]
            unknown = [kind for kind in kinds if kind not in TYPES]
            if unknown:
                unsupported("type", where, f"unknown type {unknown[0]!r}")
            else:
                out[key] = value
        elif key == "format" and value not in FORMATS:
            unsupported(
                "format", where, f"format {value!r} (supported: {', '.join(sorted(FORMATS))})"
            )
        elif key == "pattern" and not (
            isinstance(value, str) and value.startswith("^") and value.endswith("$")
        ):
            unsupported("pattern", where, "a pattern must be anchored with ^ and $")
        elif key == "pattern" and _longest_quantifier(value) > MAX_PATTERN_REPETITION:
            unsupported("pattern", where, f"a quantifier past {{{MAX_PATTERN_REPETITION}}}")
        elif key in LENGTHS and _whole(value) and value > MAX_REPETITION:
            unsupported(key, where, f"llama.cpp's grammar holds lengths up to {MAX_REPETITION}")
        elif key == "$ref" and not (isinstance(value, str) and value.startswith("#/")):
            unsupported("$ref", where, "only local references (#/...) are followed")
        elif key in _SCHEMA and not isinstance(value, bool):
            out[key] = _enforceable(value, where, notes)
        elif key in _SCHEMA_LISTS:
            if not isinstance(value, list):
                raise LmspError(
                    f"{where} must be a list of schemas.",
                    code="invalid_value",
                    param=where,
                    status=400,
                )
            out[key] = [_enforceable(sub, f"{where}[{i}]", notes) for i, sub in enumerate(value)]
        elif key in _SCHEMA_MAPS:
            if not isinstance(value, dict):
                raise LmspError(
                    f"{where} must map names to schemas.",
                    code="invalid_value",
                    param=where,
                    status=400,
                )
            out[key] = {
                name: _enforceable(sub, f"{where}.{name}", notes) for name, sub in value.items()
            }
        else:
            out[key] = value
    _check_bounds(out, path, unsupported)
    return out


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _longest_quantifier(pattern: str) -> int:
    """The largest count in the pattern's {m}, {m,} and {m,n} quantifiers (0 without)."""
    counts = [int(n) for found in _QUANTIFIER.findall(pattern) for n in found if n]
    return max(counts, default=0)


def _repeat(item: str, low: int, high: int | None) -> str:
    """`item` from `low` to `high` (None: any number of) times, in GBNF's own `{m,n}`, which
    llama.cpp turns into rules itself. (The Python converter writes `(x (x (x)?)?)?` instead:
    llama.cpp refuses that nesting past about 1,000 and crashed on 524,288.)"""
    return f"{item}{{{low},{'' if high is None else high}}}"


def _string_rule(schema: dict[str, Any], char: str) -> str:
    """A string of minLength to maxLength characters."""
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    chars = _repeat(char, low, high) + " " if high != 0 else ""
    return f'"\\"" {chars}"\\"" space'


def _array_rule(schema: dict[str, Any], item: str) -> str:
    """An array of minItems to maxItems items, comma-separated."""
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    if high == 0:
        return '"[" space "]" space'
    rest = (
        ""
        if high == 1
        else " " + _repeat(f'("," space {item})', max(low - 1, 0), high and high - 1)
    )
    full = f'"[" space {item}{rest} "]" space'
    # Not `(items)?`: llama.cpp counts the rules a repetition copies, and would refuse a
    # `?` over the `{0,1999}` inside it.
    return f'"[" space "]" space | {full}' if low == 0 else full


def _check_bounds(schema: dict[str, Any], path: str, unsupported: Any) -> None:
    """Numeric bounds the range grammar cannot write (e.g. (0, 1e-9)) are unsupported."""
    present = [key for key in BOUNDS if key in schema]
    if not present:
        return
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    try:
        if "number" in kinds:
            number_range(schema)
        elif "integer" in kinds:
            int_range(*whole_bounds(schema))
        else:
            return  # bounds say nothing about strings, objects, ...: the grammar ignores them
    except ValueError as exc:
        for key in present:
            unsupported(key, f"{path}.{key}", str(exc))
            schema.pop(key, None)


def _listed(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as its listed values only: `enum` without the values its `type` or bounds
    exclude, and neither `type` nor bounds left to override the list."""
    listed = {k: v for k, v in schema.items() if k not in BOUNDS and k != "type"}
    if isinstance(schema.get("enum"), list):
        kinds = schema.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else None
        fitting = [
            value
            for value in schema["enum"]
            if in_range(schema, value) and (kinds is None or any(_is(value, k) for k in kinds))
        ]
        # None fits: the schema accepts nothing, and an empty list is no grammar at all.
        listed["enum"] = fitting or schema["enum"]
    return listed


def _is(value: Any, kind: str) -> bool:
    """Whether `value` is of the JSON Schema type `kind`."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "integer":
        return number and float(value).is_integer()
    return {
        "number": number,
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "null": value is None,
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
    }.get(kind, False)


@functools.cache
def _converter_class() -> Any:
    """llama-cpp-python's SchemaConverter, taught numeric bounds and the empty schema."""
    module: Any = importlib.import_module("llama_cpp.llama_grammar")

    class BoundedConverter(module.SchemaConverter):  # type: ignore[misc]
        def visit(self, schema: dict[str, Any], name: str) -> str:
            kinds = schema.get("type")
            rule_name = name + "-" if name in module.RESERVED_NAMES else name or "root"
            bounded = any(key in schema for key in BOUNDS)
            listed = "enum" in schema or "const" in schema
            if listed and (bounded or isinstance(kinds, list)):
                # The listed values are what may be written: the range branches below, and
                # the base class for a list of types, would write any value of the type.
                return str(super().visit(_listed(schema), name))
            if isinstance(kinds, list) and bounded:
                # The base class would visit {"type": t} and lose the bounds.
                alternatives = [{**schema, "type": kind} for kind in kinds]
                union: str = self._generate_union_rule(name, alternatives)
                return str(self._add_rule(rule_name, union))
            if kinds == "integer" and bounded:
                body = int_range(*whole_bounds(schema))
                return str(self._add_rule(rule_name, f"({body}) space"))
            if kinds == "number" and bounded:
                return str(self._add_rule(rule_name, f"({number_range(schema)}) space"))
            if (
                kinds == "string"
                and any(k in schema for k in LENGTHS[:2])
                and not ({"pattern", "format"} & set(schema))
            ):
                char = self._add_primitive("char", module.PRIMITIVE_RULES["char"])
                return str(self._add_rule(rule_name, _string_rule(schema, char)))
            items = schema.get("items")
            if (
                kinds == "array"
                and isinstance(items, dict)
                and any(k in schema for k in LENGTHS[2:])
            ):
                item = self.visit(items, f"{name}{'-' if name else ''}item")
                return str(self._add_rule(rule_name, _array_rule(schema, item)))
            if not any(key not in ANNOTATIONS for key in schema):
                # {} accepts any value (the base class would ask for an object).
                value = self._add_primitive("value", module.PRIMITIVE_RULES["value"])
                return str(self._add_rule(rule_name, value))
            return str(super().visit(schema, name))

    return BoundedConverter


def _converter() -> Any:
    return _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def _rules_of(schema: dict[str, Any], path: str) -> dict[str, str]:
    """The converter's rules for `schema` (root rule `root`)."""
    converter = _converter()
    try:
        resolved = converter.resolve_refs(json.loads(json.dumps(schema)), "")
        converter.visit(resolved, "")
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise UnsupportedSchema(_guess_keyword(str(exc)), path, f"llama.cpp: {exc}") from exc
    rules: dict[str, str] = dict(converter._rules)
    if "char" in rules:
        rules["char"] = rules["char"].replace(_PY_CHAR_CLASS, _JSON_CHAR_CLASS, 1)
    return rules


def _guess_keyword(message: str) -> str:
    for keyword in ("pattern", "$ref", "format", "type"):
        if keyword.strip("$") in message.lower():
            return keyword
    return "schema"


# GBNF tokens: string literals, character classes and {m,n} repetitions are copied as they
# are; every other word is a rule name.
_GBNF_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{[^}]*\}|[a-zA-Z0-9-]+|\s+|.')
_RULE_NAME = re.compile(r"[a-zA-Z0-9-]+")


def _renamed(body: str, prefix: str) -> str:
    return "".join(
        f"{prefix}{t}" if _RULE_NAME.fullmatch(t) else t for t in _GBNF_TOKEN.findall(body)
    )


class GrammarBuilder:
    """Collects GBNF rules: schemas (each under its own prefix) and hand-written rules."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}

    def schema(self, schema: dict[str, Any], prefix: str, path: str, *, strict: bool = True) -> str:
        """Add the rules of `schema`; returns the name of its root rule. A strict schema is
        checked first (UnsupportedSchema); a non-strict one loses the keywords the grammar
        cannot enforce (fields.py named them in the task's notes when the request came)."""
        if strict:
            check(schema, path)
        else:
            schema = enforceable(schema, path)[0]
        for name, body in _rules_of(schema, path).items():
            self._rules[f"{prefix}{name}"] = _renamed(body, prefix)
        return f"{prefix}root"

    def any_json_object(self, prefix: str) -> str:
        """Any JSON object (json_object output, arguments of a non-strict tool)."""
        return self.schema({"type": "object"}, prefix, "schema")

    def rule(self, name: str, body: str) -> str:
        self._rules[name] = body
        return name

    def text(self) -> str:
        return "\n".join(f"{name} ::= {body}" for name, body in self._rules.items()) + "\n"


def literal(text: str) -> str:
    """A GBNF string literal for `text`."""
    return json.dumps(text, ensure_ascii=False)


def schema_grammar(schema: dict[str, Any], path: str = "schema") -> str:
    """A grammar whose root is `schema` (structured output)."""
    builder = GrammarBuilder()
    body = builder.schema(schema, "s-", path)
    builder.rule("root", body)
    return builder.text()
