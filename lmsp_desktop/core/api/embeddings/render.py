"""The answer of `POST /v1/embeddings`, from the stored vectors of a completed task."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only the annotation: numpy costs ~0.2 s of every `serve` start
    import numpy as np
    import numpy.typing as npt


def embedding_list(
    row: Any, vectors: npt.NDArray[np.float32], request: dict[str, Any] | None = None
) -> dict[str, Any]:
    """OpenAI's `list` of `embedding` objects; base64 is of little-endian float32, as
    OpenAI's (the openai SDK decodes it with numpy's float32)."""
    request = request if request is not None else json.loads(row["request"])
    as_base64 = request.get("encoding_format") == "base64"
    data = [
        {
            "object": "embedding",
            "index": index,
            "embedding": (
                base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
                if as_base64
                else vector.tolist()
            ),
        }
        for index, vector in enumerate(vectors)
    ]
    tokens = int(row["input_tokens"])
    return {
        "object": "list",
        "data": data,
        "model": row["model"],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
