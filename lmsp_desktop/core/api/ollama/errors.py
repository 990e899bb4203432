"""Ollama's error body, `{"error": "…"}`, on every answer under `/api/`: its clients read that
shape and show anything else as a raw dict. A route Ollama has and this service does not
answers 404 saying what to do instead (model management is the window's and the CLI's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.service.context import ErrorBody

PREFIX = "/api/"
_ADD_A_FILE = (
    "put a GGUF file in a model folder (the window's Models page › Add folder…, or "
    "`lmsp-desktop serve --models-dir DIR`); it is named after its file"
)
# Ollama's model management, which this service leaves to the window and the CLI: by the
# path's first segment after /api/, what to do instead.
NOT_OFFERED = {
    "pull": (
        "this service does not download from Ollama's library. Get a GGUF model from Hugging "
        "Face with the window's Models page (Download…) or, on the machine that runs the "
        "service, `lmsp-desktop models pull REPO[:QUANT]` (for example `lmsp-desktop models "
        "pull bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M`). Models pulled with Ollama itself "
        "are listed here too, under their Ollama names (GET /api/tags)."
    ),
    "push": (
        "this service does not push models to a registry: its models are files on this "
        "machine (GET /api/tags lists them)."
    ),
    "create": f"this service does not build models from a Modelfile: {_ADD_A_FILE}.",
    "blobs": f"this service does not take model blobs (`ollama create` sends them): {_ADD_A_FILE}.",
    "copy": (
        "this service does not copy or rename models: each is named after its file, or as "
        "the store it was found in names it."
    ),
    "delete": (
        "this service does not delete models: remove the file from its folder (the window's "
        "Models page › Open folder), or, for a model from Ollama's store, `ollama rm NAME`."
    ),
}


def ollama_error(exc: LmspError) -> dict[str, Any]:
    """Ollama's error body: the message alone."""
    return {"error": exc.message}


def unknown_route_message(method: str, path: str, offered: Sequence[str]) -> str:
    """A 404 under /api/ in Ollama's words: what to do instead of the model management it
    lacks, else the Ollama routes it has (`offered`, as "METHOD /api/…")."""
    instead = NOT_OFFERED.get(path.removeprefix(PREFIX).split("/", 1)[0])
    if instead is not None:
        return f"{method} {path} is not offered here: {instead}"
    return (
        f"There is no route {method} {path}. Ollama's routes here: {', '.join(offered)} "
        "(/v1/openapi.json lists all of this service's routes)."
    )


def unmatched_error(request: web.Request, offered: Sequence[str]) -> ErrorBody:
    """The error shape of a request under /api/ that no route matched (an unknown path, or a
    known one with another method): Ollama's, with its 404 in Ollama's words."""

    def body(exc: LmspError) -> dict[str, Any]:
        if exc.status == 404:
            return {"error": unknown_route_message(request.method, request.path, offered)}
        return ollama_error(exc)

    return body
