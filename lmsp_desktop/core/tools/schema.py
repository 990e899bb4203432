"""JSON Schema → GBNF through llama.cpp's converter (llama-cpp-python's `llama_grammar`).

The converter silently ignores keywords it cannot express (`minimum`, `uniqueItems`, …), so
a grammar built from such a schema would let through output the schema forbids. `check`
walks the schema first and names the first keyword the converter would ignore; callers
turn that into a 400 that names it. `GrammarBuilder` merges several schemas (one per tool)
into one grammar, each under its own rule prefix.
"""

from __future__ import annotations

import importlib
import json
import re
from typing import Any

from lmsp_desktop.core.errors import LmspError

# Keywords llama-cpp-python's SchemaConverter turns into grammar rules.
STRUCTURAL = frozenset(
    {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems",
        "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
        "definitions", "pattern", "format", "minLength", "maxLength",
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


def check(schema: Any, path: str) -> None:
    """Raise UnsupportedSchema for the first keyword the grammar would not enforce."""
    if isinstance(schema, bool):
        if schema is False:
            raise UnsupportedSchema("false", path, "a schema that accepts nothing")
        return
    if not isinstance(schema, dict):
        raise LmspError(
            f"{path} must be a JSON Schema object.", code="invalid_value", param=path, status=400
        )
    for key, value in schema.items():
        where = f"{path}.{key}"
        if key in ANNOTATIONS:
            continue
        if key not in STRUCTURAL:
            raise UnsupportedSchema(key, where)
        if key == "type":
            kinds = value if isinstance(value, list) else [value]
            for kind in kinds:
                if kind not in TYPES:
                    raise UnsupportedSchema("type", where, f"unknown type {kind!r}")
        elif key == "format" and value not in FORMATS:
            raise UnsupportedSchema(
                "format", where, f"format {value!r} (supported: {', '.join(sorted(FORMATS))})"
            )
        elif key == "pattern" and not (
            isinstance(value, str) and value.startswith("^") and value.endswith("$")
        ):
            raise UnsupportedSchema("pattern", where, "a pattern must be anchored with ^ and $")
        elif key == "$ref" and not (isinstance(value, str) and value.startswith("#/")):
            raise UnsupportedSchema("$ref", where, "only local references (#/...) are followed")
        elif key in _SCHEMA and isinstance(value, bool):
            continue  # additionalProperties / items true or false
        elif key in _SCHEMA:
            check(value, where)
        elif key in _SCHEMA_LISTS:
            if not isinstance(value, list):
                raise LmspError(
                    f"{where} must be a list of schemas.",
                    code="invalid_value",
                    param=where,
                    status=400,
                )
            for i, sub in enumerate(value):
                check(sub, f"{where}[{i}]")
        elif key in _SCHEMA_MAPS:
            if not isinstance(value, dict):
                raise LmspError(
                    f"{where} must map names to schemas.",
                    code="invalid_value",
                    param=where,
                    status=400,
                )
            for name, sub in value.items():
                check(sub, f"{where}.{name}")


def _converter() -> Any:
    module: Any = importlib.import_module("llama_cpp.llama_grammar")
    return module.SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


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

    def schema(self, schema: dict[str, Any], prefix: str, path: str) -> str:
        """Add the rules of `schema` (checked first); returns the name of its root rule."""
        check(schema, path)
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
