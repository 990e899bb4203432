"""Model ids: readable names made from file names, and the check every client-supplied id passes."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container

from lmsp_desktop.core.errors import LmspError, not_found

# An id is only ever looked up in the models table, never joined into a path; the pattern is a
# second fence: no slashes, backslashes, percent signs, NULs, leading dots or "..".
MODEL_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_-]|\.(?!\.)){0,127}$")
MAX_ID_LENGTH = 128
_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def is_valid_model_id(model_id: object) -> bool:
    return isinstance(model_id, str) and MODEL_ID_RE.fullmatch(model_id) is not None


def slug_from_filename(filename: str) -> str:
    """`SmolLM2-135M-Instruct.Q4_1.gguf` → `smollm2-135m-instruct.q4_1`."""
    stem = filename[: -len(".gguf")] if filename.lower().endswith(".gguf") else filename
    # Accented letters keep their base letter (über → uber) rather than becoming a dash.
    ascii_stem = unicodedata.normalize("NFKD", stem).encode("ascii", "ignore").decode()
    slug = _UNSAFE.sub("-", ascii_stem.lower())
    slug = re.sub(r"\.{2,}", ".", slug)
    slug = re.sub(r"-{2,}", "-", slug)
    slug = slug.strip(".-_")[: MAX_ID_LENGTH - 8].rstrip(".-_")
    return slug or "model"


def unique_model_id(base: str, taken: Container[str]) -> str:
    """`base`, or `base-2`, `base-3`… if another model already has it."""
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def model_not_found(model_id: object) -> LmspError:
    shown = model_id if is_valid_model_id(model_id) else "(an invalid id)"
    return not_found(
        f"There is no model {shown!s}. List the available models with GET /v1/models "
        "and use one of their ids.",
        code="model_not_found",
        param="model",
    )


def check_model_id(model_id: object) -> str:
    """The id itself if it can name a model at all, else 404 model_not_found."""
    if not is_valid_model_id(model_id):
        raise model_not_found(model_id)
    assert isinstance(model_id, str)
    return model_id
