"""A download counts a chunk as done only once the OS has it: a progress event must never
name bytes that a kill -9 would lose from a buffer of ours, since the restarted download
resumes from the bytes on disk (test_download_serve's kill -9 test saw a progress event 212
bytes ahead of the file once: a small read left in Python's write buffer)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from lmsp_desktop.core.downloads.fetch import _write_all, _writing
from lmsp_desktop.core.errors import LmspError


def test_a_small_chunk_is_in_the_file_as_soon_as_it_is_written(tmp_path: Path) -> None:
    partial = tmp_path / "blob.incomplete"
    partial.write_bytes(b"r" * 1000)  # resumed: appended after what is on disk
    with _writing(partial) as out:
        for n, size in enumerate([212, 1, 4096, 70_000], 1):
            _write_all(out, b"x" * size)
            # What another process (or the file after a kill -9) sees, before any close.
            assert partial.stat().st_size == 1000 + sum([212, 1, 4096, 70_000][:n])
    assert partial.read_bytes() == b"r" * 1000 + b"x" * (212 + 1 + 4096 + 70_000)


@pytest.mark.parametrize(
    ("err", "code", "words"),
    [
        (errno.ENOSPC, "disk_full", "is full"),
        (errno.EDQUOT, "disk_full", "is full"),
        (errno.EFBIG, "file_too_large", "too large for the file system"),
    ],
)
def test_a_write_the_disk_refuses_says_why_and_leaves_no_partial_file(
    tmp_path: Path, err: int, code: str, words: str
) -> None:
    partial = tmp_path / "blob.incomplete"
    with pytest.raises(LmspError) as raised, _writing(partial) as out:
        _write_all(out, b"x" * 1000)
        raise OSError(err, os.strerror(err))  # what the next write got from the kernel
    assert raised.value.code == code and words in raised.value.message
    assert str(tmp_path) in raised.value.message
    assert not partial.exists()
