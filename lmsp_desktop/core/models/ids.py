"""Model ids: readable names made from file names, and the check every client-supplied id passes."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container, Sequence

from lmsp_desktop.core.errors import LmspError, not_found

# An id is only ever looked up in the models table, never joined into a path; the pattern is a
# second fence: no backslashes, percent signs, NULs, leading dots, "..", empty or absolute
# segments. Names users know from other stores keep their shape: `qwen2.5:7b` (Ollama),
# `bartowski/qwen2.5-7b-instruct-gguf:q4_k_m` (Hugging Face, LM Studio).
_SEGMENT = r"[a-z0-9](?:[a-z0-9_-]|\.(?!\.))*"
MODEL_ID_RE = re.compile(rf"^{_SEGMENT}(?:/{_SEGMENT}){{0,3}}(?::{_SEGMENT})?$")
MAX_ID_LENGTH = 128
_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def is_valid_model_id(model_id: object) -> bool:
    return (
        isinstance(model_id, str)
        and len(model_id) <= MAX_ID_LENGTH
        and MODEL_ID_RE.fullmatch(model_id) is not None
    )


def slug(text: str, limit: int = MAX_ID_LENGTH - 8) -> str:
    """One safe id segment: lowercase ASCII letters, digits, `.`, `_` and `-`; "" if none."""
    # Accented letters keep their base letter (über → uber) rather than becoming a dash.
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    out = _UNSAFE.sub("-", ascii_text.lower())
    out = re.sub(r"\.{2,}", ".", out)
    out = re.sub(r"-{2,}", "-", out)
    return out.strip(".-_")[:limit].rstrip(".-_")


def slug_from_filename(filename: str) -> str:
    """`SmolLM2-135M-Instruct.Q4_1.gguf` → `smollm2-135m-instruct.q4_1`."""
    stem = filename[: -len(".gguf")] if filename.lower().endswith(".gguf") else filename
    return slug(stem) or "model"


def source_model_id(parts: list[str], tag: str | None) -> str | None:
    """`["bartowski", "Qwen2.5-7B-Instruct-GGUF"], "Q4_K_M"` →
    `bartowski/qwen2.5-7b-instruct-gguf:q4_k_m`; None if a part has nothing safe left."""
    segments = [slug(p, 60) for p in parts]
    tag_slug = slug(tag, 40) if tag else ""
    if not all(segments) or (tag and not tag_slug):
        return None
    model_id = "/".join(segments) + (f":{tag_slug}" if tag_slug else "")
    return model_id if is_valid_model_id(model_id) else None


def unique_model_id(base: str, taken: Container[str]) -> str:
    """`base`, or `base-2`, `base-3`… if another model already has it."""
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def model_not_found(model_id: object, tags: Sequence[str] = ()) -> LmspError:
    """404 for a name no model has; `tags`: the names of the models with the same name and
    another tag (asked for `qwen2.5`, this service's `qwen2.5:7b`), said first."""
    shown = model_id if is_valid_model_id(model_id) else "(an invalid id)"
    has = ""
    if tags and isinstance(model_id, str):
        which = "it by that name" if len(tags) == 1 else "one of them by its name"
        latest = ":" not in model_id.rpartition("/")[2]
        why = f" (a name without a tag means {model_id}:latest, as in Ollama)" if latest else ""
        has = f" This service has {', '.join(tags)}: ask for {which}{why}."
    return not_found(
        f"There is no model {shown!s}.{has} List the available models with GET /v1/models "
        "and use one of their ids. A model file just added is found by the next lookup a few "
        "seconds on, or at once after `lmsp-desktop models rescan` (the Models page's Rescan).",
        code="model_not_found",
        param="model",
    )


def check_model_id(model_id: object) -> str:
    """The id itself if it can name a model at all, else 404 model_not_found."""
    if not is_valid_model_id(model_id):
        raise model_not_found(model_id)
    assert isinstance(model_id, str)
    return model_id
