"""`sha256:<hex>` digests of whole model files, streamed in large chunks with constant memory."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# Large reads keep the per-call overhead negligible (hashlib releases the GIL on big
# updates), while one reused buffer keeps memory constant whatever the model's size.
CHUNK_SIZE = 4 * 1024 * 1024


class HashCancelled(Exception):
    """The caller asked the hashing to stop (the app is shutting down)."""


def is_digest(value: object) -> bool:
    """Whether `value` is a well-formed `sha256:<64 lowercase hex>` digest (CVE-2024-37032)."""
    return isinstance(value, str) and DIGEST_RE.fullmatch(value) is not None


def sha256_file(
    path: Path,
    *,
    chunk_size: int = CHUNK_SIZE,
    progress: Callable[[int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> str:
    """The digest of the file's whole content, as `sha256sum` computes it.

    Blocking: run it in a worker thread. `progress(n)` is called after each chunk with the
    number of bytes just read; `should_stop()` is polled between chunks.
    """
    digest = hashlib.sha256()
    buffer = bytearray(chunk_size)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        if hasattr(os, "posix_fadvise"):
            # Tell the kernel to read ahead aggressively; a hint, so failure is harmless.
            try:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except OSError:
                pass
        while True:
            if should_stop is not None and should_stop():
                raise HashCancelled(str(path))
            n = f.readinto(view)
            if not n:
                break
            digest.update(view[:n])
            if progress is not None:
                progress(n)
    return "sha256:" + digest.hexdigest()
