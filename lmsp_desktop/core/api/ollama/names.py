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
    if is_valid_model_id(name.lower()):
        tags = await _other_tags(registry, name)
        if tags:
            raise other_tags_only(name, tags)
    raise no_such_model(name)


def base_name(name: str) -> str:
    """A name without its tag: `qwen2.5:7b` → `qwen2.5`, `org/repo-gguf:q4_k_m` →
    `org/repo-gguf`, `qwen2.5` → `qwen2.5`."""
    return name.rpartition(":")[0] if has_tag(name) else name


async def _other_tags(registry: ModelRegistry, name: str) -> list[str]:
    """The names (as /api/tags shows them) of the models with the same name as `name` and
    another tag: asked for `qwen2.5`, the store's `qwen2.5:7b`. Read only on the way to a
    404."""
    base = base_name(name).lower()
    shown = ollama_names(n for info in await registry.list_models() for n in info.names)
    return sorted(shown[i] for i in shown if base_name(i).lower() == base)


def other_tags_only(name: str, tags: list[str]) -> LmspError:
    """404 for a name whose model this service has only under other tags: Ollama reads a
    name without a tag as `name:latest`, so `qwen2.5` is not `qwen2.5:7b`; say what is."""
    why = "" if has_tag(name) else f" (a name without a tag means {name}:latest, as in Ollama)"
    which = "it by that name" if len(tags) == 1 else "one of them by its name"
    return not_found(
        f'model "{name}" not found; this service has {", ".join(tags)}. Ask for {which}{why}.',
        code=MODEL_NOT_FOUND,
        param="model",
    )


def no_such_model(name: str) -> LmspError:
    # Only a name that could be an id is echoed back (it is the client's input).
    shown = name if is_valid_model_id(name.lower()) else "(an invalid name)"
    return not_found(
        f"There is no model {shown} here. GET /api/tags (ollama-python: client.list()) lists "
        "the models this service runs; use one of their names. Models are added from the "
        "window's Models page or with `lmsp-desktop models pull REPO[:QUANT]`; one just "
        "pulled with Ollama is found by the next request a few seconds on, or at once after "
        "`lmsp-desktop models rescan`.",
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
