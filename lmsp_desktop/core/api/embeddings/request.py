"""The body of `POST /v1/embeddings` into the stored embedding request."""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.api import fields
from lmsp_desktop.core.errors import invalid

EMBEDDINGS_API = "embeddings"
MAX_INPUTS = 2048  # OpenAI's limit on inputs per request
INPUT_HELP = "a string, an array of strings, an array of token ids, or an array of those"


def parse_input(value: Any, param: str = "input") -> list[str | list[int]]:
    """Every input as a text or a list of token ids, in order; each error says what to send."""
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, list) and value and all(_is_token(v) for v in value):
        items = [value]  # one input given as token ids
    elif isinstance(value, list) and value:
        items = value
    else:
        raise invalid(f"`{param}` is required: {INPUT_HELP}.", param)
    if len(items) > MAX_INPUTS:
        raise invalid(f"`{param}` holds {len(items)} inputs; send at most {MAX_INPUTS}.", param)
    out: list[str | list[int]] = []
    for n, item in enumerate(items):
        if isinstance(item, str) and item:
            # A lone surrogate (JSON allows "\ud800") has no UTF-8 form: replaced, as the
            # chat APIs' prompts are.
            out.append(item.encode("utf-8", "replace").decode("utf-8"))
        elif isinstance(item, list) and item and all(_is_token(t) for t in item):
            out.append([int(t) for t in item])
        else:
            raise invalid(
                f"`{param}[{n}]` must be a non-empty string or a non-empty array of token ids.",
                f"{param}[{n}]" if len(items) > 1 else param,
            )
    return out


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_embeddings(body: Any, default_on_restart: str) -> dict[str, Any]:
    """The normalised request of `POST /v1/embeddings` (unknown fields are ignored)."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise invalid("`encoding_format` must be float or base64.", "encoding_format")
    if body.get("dimensions") is not None:
        raise fields.unsupported(
            "`dimensions` is not supported: llama.cpp models give vectors of their own size "
            "(no shortened, Matryoshka-style output); leave `dimensions` out.",
            "dimensions",
        )
    return {
        "api": EMBEDDINGS_API,
        "model": fields.model(body),
        "input": parse_input(body.get("input")),
        "encoding_format": encoding,
        "user": fields.optional_str(body, "user"),
        "on_restart": fields.on_restart(body, default_on_restart),
    }
