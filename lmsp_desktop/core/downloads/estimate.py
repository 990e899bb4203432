"""What a hub file would take on this machine, before downloading it: its GGUF header read
with a Range request (one per part of a split model), then the same memory plan a local
model gets (core/models/memory.py).

Blocking (run in a worker thread). Each header is read into a sparse file as long as its
part, so the header reader (which checks that the tensors fit the file) sees the real size
while only the header's bytes are fetched and stored; the parts are named as on the hub, so
the local reader of a split model (gguf_meta.read_model_meta) finds them and counts every
part's layers, as it does for a split model on disk.
"""

from __future__ import annotations

import tempfile
import urllib.request
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from lmsp_desktop.core.downloads.hub import GgufChoice, HubFile, _hub_call, endpoint
from lmsp_desktop.core.models.gguf_meta import (
    GGUFError,
    GGUFTruncated,
    read_gguf_meta,
    read_model_meta,
)
from lmsp_desktop.core.models.memory import ModelShape

# Bytes of the file fetched to find its whole header: most headers (tokenizer included) fit
# in the first; models with very large vocabularies need the next.
HEADER_STEPS = (4 << 20, 32 << 20)
TIMEOUT_S = 20.0


def remote_shape(repo: str, choice: GgufChoice, token: str | None) -> ModelShape:
    """The model's shape from the headers of its file (every part of a split model: each
    part's header lists only its own tensors, so part 1's alone left the later layers'
    weights out) on the hub."""
    with tempfile.TemporaryDirectory(prefix="lmsp-header-") as folder:
        paths = [_fetch_header(repo, part, token, Path(folder)) for part in choice.files]
        return ModelShape.from_gguf(read_model_meta(paths[0]), choice.size)


def _fetch_header(repo: str, part: HubFile, token: str | None, folder: Path) -> Path:
    """`part`'s header in a sparse file of its size in `folder`, under its own file name."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils._headers import build_hf_headers

    url = hf_hub_url(repo, part.name, endpoint=endpoint())
    meta = _hub_call(lambda: get_hf_file_metadata(url, token=token, endpoint=endpoint()), repo)
    headers = build_hf_headers(token=token)
    if urlparse(meta.location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)  # a CDN's signed URL: the token stays home
    size = meta.size or part.size or 0
    path = folder / PurePosixPath(part.name).name
    for step in HEADER_STEPS:
        request = urllib.request.Request(
            meta.location, headers={**headers, "Range": f"bytes=0-{min(step, size) - 1}"}
        )
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
            head = answer.read(step)
        path.write_bytes(head)
        # Read as fetched first: past the fetched bytes a sparse file reads zeros, which
        # parse as empty keys and tensors, so a header longer than `step` would pass
        # unnoticed with its later tensors (the layers' bytes) lost, never asking for more.
        try:
            read_gguf_meta(path)
        except GGUFTruncated:
            pass  # the whole header was read; the tensor data is not here (as wanted)
        except GGUFError as exc:
            if "header is truncated" not in str(exc) or step == HEADER_STEPS[-1]:
                raise
            if len(head) < step:  # the whole file was fetched: it is cut, not long
                raise
            continue
        with path.open("r+b") as out:
            out.truncate(max(size, len(head)))  # sparse: the rest is never read
        return path
    raise GGUFError("the header is larger than LMSP reads ahead")
