"""What llama.cpp itself says it allocates for a model's contexts: run as a child process
(`python -m tests.support.llama_sizes REQUEST_JSON`), it loads the model, opens each context
as the engine opens it (llama_native.open_context) and the embedding context as
llama_embed.EmbeddingContext does, and prints, as JSON, the sizes llama.cpp's load log gives
for each ("KV buffer size", "compute buffer size", "output buffer size", MiB). A child,
because the log callback is process-wide: the test process keeps its own."""

from __future__ import annotations

import ctypes
import json
import re
import sys
from typing import Any

SIZES = {
    "kv": re.compile(r"KV buffer size =\s*([\d.]+) MiB"),
    "compute": re.compile(r"compute buffer size =\s*([\d.]+) MiB"),
    "output": re.compile(r"output buffer size =\s*([\d.]+) MiB"),
}


def main(request: dict[str, Any]) -> dict[str, Any]:
    from lmsp_desktop.core.engines import llama_native as native
    from lmsp_desktop.core.engines.llama_embed import POOLING_MEAN, EmbeddingContext

    lc = native.lowlevel()
    log: list[str] = []

    def keep(_level: int, text: bytes, _user: Any) -> None:
        log.append(text.decode("utf-8", "replace"))

    callback = lc.llama_log_callback(keep)
    lc.llama_log_set(callback, ctypes.c_void_p(0))

    def sizes() -> dict[str, float]:
        text = "".join(log)
        log.clear()
        found = {}
        for name, pattern in SIZES.items():
            values = [float(v) * (1 << 20) for v in pattern.findall(text)]
            assert len(values) == 1, (name, text)
            found[name] = values[0]
        return found

    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(
        request["model"].encode(), lc.llama_model_default_params()
    )
    assert model, request["model"]
    log.clear()
    out: dict[str, Any] = {"contexts": []}
    contexts = []  # kept open: each one's sizes are read as it opens
    for shape in request["contexts"]:
        contexts.append(
            native.open_context(
                model,
                n_ctx_seq=shape["n_ctx_seq"],
                n_seq=shape["n_seq"],
                n_threads=1,
                n_batch=shape["n_batch"],
                kv_type=request["kv_type"],
                flash_attn=request["flash_attn"],
            )
        )
        out["contexts"].append(sizes())
    if request.get("embedding"):
        EmbeddingContext(model, n_ctx=request["embedding"], n_threads=1, pooling=POOLING_MEAN)
        out["embedding"] = sizes()
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
