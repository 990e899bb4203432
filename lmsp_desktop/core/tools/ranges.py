"""GBNF for bounded integers and numbers (`minimum`, `maximum`, `exclusiveMinimum`,
`exclusiveMaximum`), which llama-cpp-python's Python SchemaConverter leaves out.

`int_range` is a port of `build_min_max_int` from llama.cpp's common/json-schema-to-grammar.cpp
(the C++ converter llama-server uses), with Python's unbounded ints in place of int64 limits.
Numbers: llama.cpp enforces no bounds on them. `number_range` writes the decimals with up to
FRACTION_DIGITS fraction digits (and up to DECIMALS whole digits; no exponent) that lie within
the bounds, exclusive ones included: `(0, 1)` allows `0.5`, `0.00000001` and
`0.99999999`, never `0` or `1`. Each value, once a client reads it as a double, still lies
within the bound as the client's validator sees it (an exclusive bound's nearest double
below or above it is the real limit). Bounds that hold no such decimal (say `(0, 1e-12)`)
raise ValueError: the caller reports them as keywords the grammar cannot enforce.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# Most digits an unbounded side allows (as llama.cpp: int64 has 19; JSON numbers past 2^53
# lose precision anyway).
DECIMALS = 16
# Most fraction digits a bounded number may have: a value is one of the decimals with this
# many digits (trailing zeros may be left out) within the bounds.
FRACTION_DIGITS = 8
_STEP = Decimal(1).scaleb(-FRACTION_DIGITS)
_WIDEST = Decimal(10**DECIMALS) - _STEP


def _bound(schema: dict[str, Any], key: str) -> float | int | None:
    """The bound `key` (None when absent); a bound that is not a finite number raises."""
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"`{key}` must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"`{key}` must be a finite number")
    return value


def whole_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None]:
    """The smallest and largest whole number the schema's bounds allow (None: unbounded)."""
    minimum, maximum = _bound(schema, "minimum"), _bound(schema, "maximum")
    above, below = _bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")
    lows = [math.ceil(minimum)] if minimum is not None else []
    if above is not None:
        lows.append(math.floor(above) + 1)
    highs = [math.floor(maximum)] if maximum is not None else []
    if below is not None:
        highs.append(math.ceil(below) - 1)
    return (max(lows) if lows else None), (min(highs) if highs else None)


def in_range(schema: dict[str, Any], value: Any) -> bool:
    """Whether `value` meets the schema's bounds (a value that is not a number: yes, the
    bounds say nothing about it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    minimum, maximum = _bound(schema, "minimum"), _bound(schema, "maximum")
    above, below = _bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")
    return (
        (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
        and (above is None or value > above)
        and (below is None or value < below)
    )


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


def decimal_bounds(schema: dict[str, Any]) -> tuple[Decimal, Decimal]:
    """The smallest and largest decimal of FRACTION_DIGITS fraction digits (and at most
    DECIMALS whole digits) within the schema's bounds; ValueError when there is none."""
    lows, highs = [-_WIDEST], [_WIDEST]
    minimum, maximum = _bound(schema, "minimum"), _bound(schema, "maximum")
    above, below = _bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")
    # An inclusive bound as written (0.3, not the double's 0.29999…): a decimal at or below
    # it reads as a double at or below the bound's own double.
    if minimum is not None:
        lows.append(_written(minimum))
    if maximum is not None:
        highs.append(_written(maximum))
    # An exclusive one: the nearest double inside it, exactly, is the inclusive limit (a
    # decimal just under 10 by less than the doubles' spacing there would read as 10.0).
    if above is not None:
        lows.append(_inside(above, math.inf))
    if below is not None:
        highs.append(_inside(below, -math.inf))
    # (Clamped first: quantizing 1e300 to the digit grid would overflow Decimal's precision.)
    low = min(max(lows), _WIDEST + 1).quantize(_STEP, rounding=ROUND_CEILING)
    high = max(min(highs), -_WIDEST - 1).quantize(_STEP, rounding=ROUND_FLOOR)
    if low > high:
        raise ValueError(f"the bounds hold no decimal with up to {FRACTION_DIGITS} fraction digits")
    return low, high


def _written(value: float | int) -> Decimal:
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def _inside(value: float | int, towards: float) -> Decimal:
    """The exact value of the double next to `value` on the side of `towards`."""
    if isinstance(value, int) and abs(value) > 10**DECIMALS:
        return Decimal(value)  # past the widest value anyway
    return Decimal(math.nextafter(float(value), towards))


def number_range(schema: dict[str, Any]) -> str:
    """GBNF (no trailing space rule) for JSON numbers within the schema's bounds: the
    decimals of decimal_bounds' range, with up to FRACTION_DIGITS fraction digits."""
    low, high = decimal_bounds(schema)
    alternatives = []
    if high >= 0:
        alternatives.append(_magnitudes(max(low, Decimal(0)), high))
    if low < 0:
        # "-" and a magnitude; not "-0" (0 itself is written without the sign).
        alternatives.append(f'"-" ({_magnitudes(max(-high, _STEP), -low)})')
    return " | ".join(f"({alternative})" for alternative in alternatives)


def _magnitudes(low: Decimal, high: Decimal) -> str:
    """The unsigned decimals in [low, high] (0 <= low <= high, both on the digit grid)."""
    low_whole, low_fraction = _split(low)
    high_whole, high_fraction = _split(high)
    if low_whole == high_whole:
        return f'"{low_whole}" {_fraction(*_between(low_fraction, high_fraction))}'.rstrip()
    alternatives = []
    # Whole parts whose every fraction lies in the range; the ends' own rules otherwise.
    first, last = low_whole, high_whole
    if low_fraction.strip("0"):
        alternatives.append(f'"{low_whole}" {_fraction(*_at_least(low_fraction))}')
        first += 1
    if high_fraction.strip("9"):
        alternatives.append(f'"{high_whole}" {_fraction(*_at_most(high_fraction))}'.rstrip())
        last -= 1
    if first <= last:
        any_fraction = _fraction(f"[0-9]{{1,{FRACTION_DIGITS}}}", True)
        alternatives.append(f"({int_range(first, last)}) {any_fraction}")
    return " | ".join(alternatives)


def _split(value: Decimal) -> tuple[int, str]:
    """The whole part and the FRACTION_DIGITS fraction digits of a non-negative value."""
    whole = int(value)
    digits = str(int((value - whole).scaleb(FRACTION_DIGITS)))
    return whole, digits.rjust(FRACTION_DIGITS, "0")


# Fraction digits: a rule for the non-empty digit strings (up to the length of the bound's
# digits) that, padded with zeros, compare with the bound as asked; None when only the
# empty string does; and whether the empty string (no fraction: all zeros) does.
Digits = tuple[str | None, bool]


def _fraction(rule: str | None, empty: bool) -> str:
    """`.digits`, optional where the empty fraction qualifies."""
    if rule is None:
        return ""
    return f'("." ({rule}))?' if empty else f'"." ({rule})'


def _then(digit: str, rest: Digits) -> str:
    """`digit` followed by the strings of `rest`."""
    rule, empty = rest
    if rule is None:
        return f'"{digit}"'
    return f'"{digit}" ({rule})?' if empty else f'"{digit}" ({rule})'


def _any_after(first: str, last: str, left: int) -> str:
    """A digit from first to last, then up to `left` more digits."""
    head = f"[{first}]" if first == last else f"[{first}-{last}]"
    return f"{head} [0-9]{{0,{left}}}" if left else head


def _at_least(bound: str) -> Digits:
    if not bound.strip("0"):
        return (f"[0-9]{{1,{len(bound)}}}" if bound else None), True
    first, rest = bound[0], bound[1:]
    alternatives = [_then(first, _at_least(rest))]
    if first != "9":
        alternatives.append(_any_after(chr(ord(first) + 1), "9", len(rest)))
    return " | ".join(alternatives), False


def _at_most(bound: str) -> Digits:
    if not bound:
        return None, True
    first, rest = bound[0], bound[1:]
    alternatives = [_then(first, _at_most(rest))]
    if first != "0":
        alternatives.append(_any_after("0", chr(ord(first) - 1), len(rest)))
    return " | ".join(alternatives), True


def _between(low: str, high: str) -> Digits:
    """Between two digit strings of one length, low <= high."""
    if not low:
        return None, True
    empty = not low.strip("0")
    if low[0] == high[0]:
        return _then(low[0], _between(low[1:], high[1:])), empty
    alternatives = [_then(low[0], _at_least(low[1:])), _then(high[0], _at_most(high[1:]))]
    if ord(low[0]) + 1 <= ord(high[0]) - 1:
        alternatives.append(_any_after(chr(ord(low[0]) + 1), chr(ord(high[0]) - 1), len(low) - 1))
    return " | ".join(alternatives), empty


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
