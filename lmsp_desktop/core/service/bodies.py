"""Reading request bodies and query values with errors that name the field."""

from __future__ import annotations

import json
from typing import Any

import orjson
from aiohttp import web

from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.json_text import has_long_number


async def read_json(request: web.Request) -> Any:
    """The JSON body; 400 invalid_json for bad UTF-8, bad JSON or absurd nesting. Read by
    orjson (B1: a fraction of json.loads' time), which also refuses what JSON does not allow
    and json.loads took: NaN and Infinity, lone surrogate escapes, nesting past 1,024; a
    body with a 19-digit run is read by json.loads, so big integers stay exact."""
    raw = await request.read()
    if not raw:
        raise invalid("The request needs a JSON body.", None, "invalid_json")
    try:
        if has_long_number(raw):
            value = json.loads(raw, parse_constant=_not_json)
            # As orjson does, refuse a lone surrogate escape ("\\ud800"), which json.loads
            # takes: such a string cannot be written as UTF-8 later (the store, an SSE
            # event), and a body must not be accepted for its unrelated long number.
            json.dumps(value, ensure_ascii=False).encode()  # UnicodeEncodeError: a ValueError
            return value
        return orjson.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # orjson's "depth limit exceeded" is a JSONDecodeError: name it, the JSON was valid.
        deep = isinstance(exc, RecursionError) or "depth limit" in str(exc)
        message = (
            "The body's JSON is nested deeper than 1,024 levels. Send a flatter JSON object."
            if deep
            else f"The body is not valid UTF-8 JSON ({type(exc).__name__}). Send a JSON object."
        )
        raise invalid(message, None, "invalid_json") from None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def query_int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    value = request.query.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise invalid(f"`{name}` must be a whole number.", name) from None
    if not lo <= number <= hi:
        raise invalid(f"`{name}` must be from {lo} to {hi}.", name)
    return number


def query_flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise invalid(f"`{name}` must be true or false.", name)
    return value in ("true", "1")


def list_body(data: list[Any], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": data, "has_more": has_more}
