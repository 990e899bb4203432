"""What a hub file would take on this machine, before downloading it: its GGUF header read
with a Range request, then the same memory plan a local model gets (core/models/memory.py).

Blocking (run in a worker thread). The header is read into a sparse file as long as the
model file, so the header reader (which checks that the tensors fit the file) sees the
real size while only the header's bytes are fetched and stored.
"""

from __future__ import annotations

import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from lmsp_desktop.core.downloads.hub import GgufChoice, _hub_call, endpoint
from lmsp_desktop.core.models.gguf_meta import GGUFError, read_gguf_meta
from lmsp_desktop.core.models.memory import ModelShape

# Bytes of the file fetched to find its whole header: most headers (tokenizer included) fit
# in the first; models with very large vocabularies need the next.
HEADER_STEPS = (4 << 20, 32 << 20)
TIMEOUT_S = 20.0


def remote_shape(repo: str, choice: GgufChoice, token: str | None) -> ModelShape:
    """The model's shape from the header of its (first) file on the hub."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils._headers import build_hf_headers

    first = choice.files[0]
    url = hf_hub_url(repo, first.name, endpoint=endpoint())
    meta = _hub_call(lambda: get_hf_file_metadata(url, token=token, endpoint=endpoint()), repo)
    headers = build_hf_headers(token=token)
    if urlparse(meta.location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)  # a CDN's signed URL: the token stays home
    size = meta.size or first.size or 0
    with tempfile.TemporaryDirectory(prefix="lmsp-header-") as folder:
        path = Path(folder) / "header.gguf"
        for step in HEADER_STEPS:
            request = urllib.request.Request(
                meta.location, headers={**headers, "Range": f"bytes=0-{min(step, size) - 1}"}
            )
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                head = answer.read(step)
            with path.open("wb") as out:
                out.write(head)
                out.truncate(max(size, len(head)))  # sparse: the rest is never read
            try:
                return ModelShape.from_gguf(read_gguf_meta(path), choice.size)
            except GGUFError as exc:
                if "header is truncated" not in str(exc) or step == HEADER_STEPS[-1]:
                    raise
    raise GGUFError("the header is larger than LMSP reads ahead")
