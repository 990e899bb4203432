"""GBNF for bounded integers and numbers (`minimum`, `maximum`, `exclusiveMinimum`,
`exclusiveMaximum`), which llama-cpp-python's Python SchemaConverter leaves out.

`int_range` is a port of `build_min_max_int` from llama.cpp's common/json-schema-to-grammar.cpp
(the C++ converter llama-server uses), with Python's unbounded ints in place of int64 limits.
Numbers: llama.cpp enforces no bounds on them; `number_range` builds a grammar whose every
value lies in the range: the whole numbers of the range, plus `k.ddd` for every whole part
`k` whose whole unit interval lies in it (so [0, 1] allows 0, 1 and any 0.ddd). No exponent.
Range bounds that hold no such value (e.g. [0.2, 0.8]) raise ValueError: the caller reports
the keyword as one the grammar cannot enforce.
"""

from __future__ import annotations

import math
from typing import Any

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# Most digits an unbounded side allows (as llama.cpp: int64 has 19; JSON numbers past 2^53
# lose precision anyway).
DECIMALS = 16


def whole_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The smallest and largest whole number the schema's bounds allow (None: unbounded)."""
    for key in BOUNDS:
        value = schema.get(key)
        if key in schema and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"`{key}` must be a number")
    lows = [math.ceil(schema["minimum"])] if "minimum" in schema else []
    if "exclusiveMinimum" in schema:
        lows.append(math.floor(schema["exclusiveMinimum"]) + 1)
    highs = [math.floor(schema["maximum"])] if "maximum" in schema else []
    if "exclusiveMaximum" in schema:
        highs.append(math.ceil(schema["exclusiveMaximum"]) - 1)
    return (max(lows) if lows else None), (min(highs) if highs else None)


def int_range(low: int | None, high: int | None) -> str:
    """GBNF (no trailing space rule) for the decimal integers in [low, high]."""
    if low is not None and high is not None and low > high:
        raise ValueError("the bounds leave no whole number")
    # One-sided bounds: llama.cpp has a separate branch for them, which lets 15 through for
    # `minimum: 105` (it reads the digits after the first as a number and loses their
    # leading zero); the two-sided branch with the widest value on the open side is exact.
    widest = 10**DECIMALS - 1
    out: list[str] = []
    _min_max_int(-widest if low is None else low, widest if high is None else high, out)
    return "".join(out)


def number_range(schema: dict[str, Any]) -> str:
    """GBNF (no trailing space rule) for JSON numbers within the schema's bounds."""
    low, high = whole_bounds(schema)
    alternatives = []
    if low is None or high is None or low <= high:
        alternatives.append(f"({int_range(low, high)})")
    # `k.ddd` (k >= 0) lies in [k, k+1): k must satisfy the lower bound (ddd may be all
    # zeros) and k+1 must not exceed the upper one.
    upper = _fraction_ceiling(schema)
    positive_low = max(low, 0) if low is not None else 0
    if upper is None or positive_low <= upper:
        alternatives.append(f'({int_range(positive_low, upper)}) "." [0-9]{{1,{DECIMALS}}}')
    # `-m.ddd` (m >= 0) lies in (-(m+1), -m]: -m must satisfy the upper bound, -(m+1) the
    # lower one.
    floor_m = max(-high, 0) if high is not None else 0
    top_m = _negative_fraction_ceiling(schema)
    if top_m is None or floor_m <= top_m:
        alternatives.append(f'"-" ({int_range(floor_m, top_m)}) "." [0-9]{{1,{DECIMALS}}}')
    if not alternatives:
        raise ValueError("the bounds leave no value the grammar can write")
    return " | ".join(alternatives)


def _fraction_ceiling(schema: dict[str, Any]) -> int | None:
    """The largest k with k+1 within the upper bound (None: unbounded)."""
    limits: list[float] = [schema[k] for k in ("maximum", "exclusiveMaximum") if k in schema]
    if not limits:
        return None
    return math.floor(min(limits)) - 1


def _negative_fraction_ceiling(schema: dict[str, Any]) -> int | None:
    """The largest m with -(m+1) within the lower bound (None: unbounded)."""
    limits: list[float] = [schema[k] for k in ("minimum", "exclusiveMinimum") if k in schema]
    if not limits:
        return None
    return math.floor(-max(limits)) - 1


# -- port of llama.cpp's build_min_max_int -------------------------------------------------
def _digit_range(out: list[str], start: str, end: str) -> None:
    out.append(f"[{start}]" if start == end else f"[{start}-{end}]")


def _more_digits(out: list[str], count: int) -> None:
    out.append("[0-9]" if count == 1 else f"[0-9]{{{count}}}")


def _uniform_range(out: list[str], start: str, end: str) -> None:
    i = 0
    while i < len(start) and i < len(end) and start[i] == end[i]:
        i += 1
    if i > 0:
        out.append(f'"{start[:i]}"')
    if i < len(start) and i < len(end):
        if i > 0:
            out.append(" ")
        sub_len = len(start) - i - 1
        if sub_len > 0:
            start_sub, end_sub = start[i + 1 :], end[i + 1 :]
            zeros, nines = "0" * sub_len, "9" * sub_len
            if start_sub == zeros and end_sub == nines:  # e.g. 100..599: [1-5] [0-9]{2}
                _digit_range(out, start[i], end[i])
                out.append(" ")
                _more_digits(out, sub_len)
                return
            reached = False
            out.append("(")
            if start_sub == zeros:
                _digit_range(out, start[i], chr(ord(end[i]) - 1))
                out.append(" ")
                _more_digits(out, sub_len)
            else:
                out.append(f"[{start[i]}] (")
                _uniform_range(out, start_sub, nines)
                out.append(")")
                if ord(start[i]) < ord(end[i]) - 1:
                    out.append(" | ")
                    if end_sub == nines:
                        _digit_range(out, chr(ord(start[i]) + 1), end[i])
                        reached = True
                    else:
                        _digit_range(out, chr(ord(start[i]) + 1), chr(ord(end[i]) - 1))
                    out.append(" ")
                    _more_digits(out, sub_len)
            if not reached:
                out.append(" | ")
                _digit_range(out, end[i], end[i])
                out.append(" ")
                _uniform_range(out, zeros, end_sub)
            out.append(")")
        else:
            out.append(f"[{start[i]}-{end[i]}]")


def _min_max_int(low: int, high: int, out: list[str]) -> None:
    if low < 0 and high < 0:
        out.append('"-" (')
        _min_max_int(-high, -low, out)
        out.append(")")
        return
    if low < 0:
        out.append('"-" (')
        _min_max_int(0, -low, out)
        out.append(") | ")
        low = 0
    low_s, high_s = str(low), str(high)
    for digits in range(len(low_s), len(high_s)):
        _uniform_range(out, low_s, "9" * digits)
        low_s = "1" + "0" * digits
        out.append(" | ")
    _uniform_range(out, low_s, high_s)
