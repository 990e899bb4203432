"""The free text before a call under `auto`: any text in which the tool-call opening does
not occur (checked on every short string, through a regular expression made from the GBNF)."""

from __future__ import annotations

import itertools
import re

from lmsp_desktop.core.tools.grammars import _text_without
from lmsp_desktop.core.tools.schema import GrammarBuilder
from tests.unit.core.test_tools_ranges import as_regex

_RULE = re.compile(r"\b(free-[a-z]+)\b")


def free_text_regex(tag: str) -> re.Pattern[str]:
    builder = GrammarBuilder()
    _text_without(builder, tag)
    rules = dict(line.split(" ::= ", 1) for line in builder.text().splitlines())

    def expand(body: str) -> str:
        return _RULE.sub(lambda m: f"({expand(rules[m.group(1)])})", body)

    return as_regex(expand(rules["free-text"]))


def test_every_short_text_is_free_exactly_when_the_opening_is_not_in_it() -> None:
    tag = "<ab>"
    pattern = free_text_regex(tag)
    for size in range(8):
        for letters in itertools.product("<ab>x", repeat=size):
            text = "".join(letters)
            assert bool(pattern.fullmatch(text)) is (tag not in text), text


def test_the_real_opening_is_refused_and_its_starts_allowed() -> None:
    pattern = free_text_regex("<tool_call>")
    assert not pattern.fullmatch("Sure. <tool_call>")
    assert not pattern.fullmatch("<<tool_call>")
    assert pattern.fullmatch("a <b> and <tool_cal")
    assert pattern.fullmatch("<tool_calls> <<tool>")
