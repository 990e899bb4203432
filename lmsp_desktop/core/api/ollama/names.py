"""Ollama's model names: `name` and `name:latest` name one model, as in Ollama, whose clients
(ollama-python, Open WebUI, Continue) add `:latest` to a name without a tag. Ollama's routes
turn a name into a model here (`find_model`) and show each model by the name `ollama_names`
gives it, which finds it again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from lmsp_desktop.core.errors import LmspError, not_found
from lmsp_desktop.core.models.ids import is_valid_model_id

if TYPE_CHECKING:
    from lmsp_desktop.core.models.info import ModelInfo
    from lmsp_desktop.core.models.registry import ModelRegistry

LATEST = ":latest"
MODEL_NOT_FOUND = "model_not_found"


def has_tag(name: str) -> bool:
    """A tag is what follows `:` in the last segment: `qwen2.5:7b`, `org/repo-gguf:q4_k_m`."""
    return ":" in name.rpartition("/")[2]


def other_spelling(name: str) -> str | None:
    """The same model's other name in Ollama: `x:latest` → `x`, `x` → `x:latest`; None for a
    name with another tag (`x:7b` is not `x`)."""
    if name.lower().endswith(LATEST):
        return name[: -len(LATEST)] or None
    return None if has_tag(name) else name + LATEST


async def find_model(registry: ModelRegistry, name: str) -> ModelInfo:
    """The model an Ollama client names: the one whose id is `name` (so an id that really ends
    in `:latest`, a model from Ollama's own store, wins), else the one named the other way
    (`x:latest` → `x`, `x` → `x:latest`); else 404 in words for an Ollama user."""
    try:
        return await registry.get(name)
    except LmspError as exc:
        if exc.code != MODEL_NOT_FOUND:
            raise
        missing = exc
    other = other_spelling(name)
    if other is not None:
        try:
            return await registry.get(other)
        except LmspError as exc:
            if exc.code != MODEL_NOT_FOUND:
                raise
    upstreams = registry.upstreams
    if upstreams is not None and upstreams.owns(name):
        raise missing  # it says which upstream lacks which model
    raise no_such_model(name)


def no_such_model(name: str) -> LmspError:
    # Only a name that could be an id is echoed back (it is the client's input).
    shown = name if is_valid_model_id(name.lower()) else "(an invalid name)"
    return not_found(
        f"There is no model {shown} here. GET /api/tags (ollama-python: client.list()) lists "
        "the models this service runs; use one of their names. Models are added from the "
        "window's Models page or with `lmsp-desktop models pull REPO[:QUANT]`.",
        code=MODEL_NOT_FOUND,
        param="model",
    )


def ollama_names(model_ids: Iterable[str]) -> dict[str, str]:
    """How Ollama's routes show each model, by id: with a tag, as Ollama names every model
    (`/api/tags` shows `llama3:latest`, and clients look a model up by that name), so an id
    without one is shown as `id:latest`, unless another model's id is that name (then the
    bare id, which finds it)."""
    taken = set(model_ids)
    return {
        model_id: model_id if has_tag(model_id) or model_id + LATEST in taken else model_id + LATEST
        for model_id in taken
    }
