"""Ollama's `/api/embed` (`input`: a string or a list) and the older `/api/embeddings`
(`prompt`): bodies into the embedding request that `/v1/embeddings` stores too, so each call
is the same task of kind `embedding` (core/api/embeddings/). `/api/embed` cuts an input too
long for the context to fit (`truncate`, true by default), as Ollama does."""

from __future__ import annotations

from typing import Any

from lmsp_desktop.core.api import fields
from lmsp_desktop.core.api.embeddings.request import parse_input
from lmsp_desktop.core.errors import invalid

OLLAMA_EMBED_API = "ollama"


def _request(body: Any, default_on_restart: str, key: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_json")
    if body.get("dimensions") is not None:
        raise fields.unsupported(
            "`dimensions` is not supported: llama.cpp models give vectors of their own size; "
            "leave `dimensions` out.",
            "dimensions",
        )
    value = body.get(key)
    if key == "prompt" and not isinstance(value, str):
        raise invalid("`prompt` is required: the text to embed.", "prompt")
    return {
        "api": OLLAMA_EMBED_API,
        "model": fields.model(body),
        "input": parse_input(value, key),
        "encoding_format": "float",
        "on_restart": fields.on_restart(body, default_on_restart),
    }


def parse_embed(body: Any, default_on_restart: str) -> dict[str, Any]:
    """`/api/embed`: `model`, `input` (a string or a list of strings), `truncate` (true unless
    false, as Ollama's: an input longer than the context is cut to fit, not refused)."""
    request = _request(body, default_on_restart, "input")
    request["truncate"] = fields.flag(body, "truncate", True)
    return request


def parse_embeddings(body: Any, default_on_restart: str) -> dict[str, Any]:
    """`/api/embeddings`: `model`, `prompt` (one string)."""
    return _request(body, default_on_restart, "prompt")
