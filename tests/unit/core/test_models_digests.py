"""Streamed sha256 digests: the same bytes `sha256sum` hashes, in chunks, with progress."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from lmsp_desktop.core.models.digests import HashCancelled, is_digest, sha256_file

CHUNK = 1024


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 17])
def test_digest_of_the_whole_file_at_chunk_boundaries(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    reported: list[int] = []
    digest = sha256_file(path, chunk_size=CHUNK, progress=reported.append)
    assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert sum(reported) == size
    assert all(n <= CHUNK for n in reported)


def test_stop_request_abandons_hashing(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"x" * (10 * CHUNK))
    reported: list[int] = []
    with pytest.raises(HashCancelled):
        sha256_file(
            path, chunk_size=CHUNK, progress=reported.append, should_stop=lambda: len(reported) >= 3
        )
    assert sum(reported) == 3 * CHUNK


def test_digest_format_check() -> None:
    assert is_digest("sha256:" + "ab" * 32)
    assert not is_digest("sha256:" + "AB" * 32)
    assert not is_digest("sha256-" + "ab" * 32)
    assert not is_digest("sha256:../../../etc/passwd")
    assert not is_digest("sha256:" + "ab" * 32 + "\n")
    assert not is_digest(None)
