"""Fetching one hub file into the Hugging Face cache, resumably. Blocking: the download
manager runs it in a worker thread and reads its progress from a `Transfer`.

Why not `hf_hub_download` for the bytes: huggingface_hub 2.x writes each download to a
process-unique temporary file and deletes it on any failure, so nothing survives a restart
or a `kill -9`; and it reads in 10 MB chunks, so neither progress nor a cancel could be
finer than that. Here the partial file has a stable name (`blobs/<etag>.incomplete`, the
name earlier huggingface_hub releases used) and grows by Range requests across restarts,
hashed as it is written. The library still does the rest: the file's metadata (HEAD with
`X-Repo-Commit`, `X-Linked-Etag`, `X-Linked-Size`), the headers and token, the HTTP session
and its errors, and, once the blob is in place and verified, the snapshot link and ref
(`hf_hub_download` finds the blob and only links it), so other tools share the cache.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import logging
import os
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlparse

from lmsp_desktop.core.downloads.hub import (
    CUT_ADVICE,
    HUB_ERROR_ADVICE,
    HubFile,
    _hub_call,
    _reason,
    cache_dir,
    endpoint,
    hub_unreachable,
)
from lmsp_desktop.core.errors import LmspError

log = logging.getLogger(__name__)
# A connection that sends nothing for this long is given up and resumed (a read timeout, so
# a slow link that still trickles is never cut): a hub gone quiet shows as a wait within
# seconds. Ollama's pull likewise drops a part that stalls and tries it again.
READ_TIMEOUT_S = 5.0
RETRIES = 5  # attempts in a row without a byte of progress before the task fails
HASH_CHUNK = 8 * 1024 * 1024
READ_BUFFER = 1024 * 1024
WRITEBACK_EVERY = 64 * 1024 * 1024


class Stopped(Exception):
    """The transfer was asked to stop (a cancel, or the service stopping)."""


@dataclass
class Transfer:
    """What the download's thread and the event loop share: bytes of the current file so
    far (written by the thread, read by the loop) and the stop flag (the other way)."""

    stop: threading.Event = field(default_factory=threading.Event)
    file_done: int = 0
    resumed_from: int = 0  # bytes found on disk when the current file started
    partial: Path | None = None  # the file being written (a cancel deletes it)


def partial_path(blob: Path) -> Path:
    return blob.with_name(blob.name + ".incomplete")


def storage_folder(repo: str) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return Path(cache_dir()) / repo_folder_name(repo_id=repo, repo_type="model")


def kept_partial(repo: str, file: HubFile) -> Path | None:
    """The partial file a download of `file` left in the cache (named by its LFS sha256, the
    hub's etag for it), if any: what a resumed download continues from."""
    if not file.sha256:
        return None
    partial = partial_path(storage_folder(repo) / "blobs" / file.sha256.lower())
    return partial if partial.exists() else None


def fetch(
    repo: str, revision: str, commit: str, file: HubFile, token: str | None, transfer: Transfer
) -> Path:
    """Download `file` of `repo` at `commit` into the cache (resuming a partial file), check
    its sha256, link it into the commit's snapshot and point `revision` (a branch) at it.
    Returns the snapshot path."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.utils._headers import build_hf_headers

    url = hf_hub_url(repo, file.name, revision=commit, endpoint=endpoint())
    meta = _hub_call(lambda: get_hf_file_metadata(url, token=token, endpoint=endpoint()), repo)
    etag = (meta.etag or file.sha256 or "").lower()
    expected = (file.sha256 or etag).lower()
    blob = storage_folder(repo) / "blobs" / etag
    with _exclusive(repo, etag, transfer):
        if not blob.exists():
            headers: dict[str, Any] = build_hf_headers(token=token)
            if urlparse(meta.location).netloc != urlparse(url).netloc:
                headers.pop("authorization", None)  # a CDN's signed URL: the token stays home
            size = meta.size or file.size
            _download(meta.location, blob, file.name, headers, size, expected, transfer)
    path = _hub_call(
        lambda: hf_hub_download(
            repo,
            file.name,
            revision=commit,
            cache_dir=cache_dir(),
            token=token,
            endpoint=endpoint(),
        ),
        repo,
    )
    ref = storage_folder(repo) / "refs" / revision
    # The branch points at the commit fetched, as hf_hub_download(revision=branch) leaves it
    # (kept at an older commit, a file fetched at a newer one was not found under `main`).
    if revision != commit and (not ref.exists() or ref.read_text() != commit):
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
    return Path(path)


@contextlib.contextmanager
def _exclusive(repo: str, etag: str, transfer: Transfer) -> Iterator[None]:
    """One writer per blob: huggingface_hub's own lock file for it (`.locks/<repo>/<etag>.lock`),
    so a second task for the same file, or another tool's hf_hub_download, waits and then
    finds the blob instead of appending to the same partial file. The wait ends on a stop."""
    import filelock

    folder = Path(cache_dir()) / ".locks" / storage_folder(repo).name
    folder.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(str(folder / f"{etag}.lock"))
    while True:
        try:
            lock.acquire(timeout=0.5)
            break
        except filelock.Timeout:
            if transfer.stop.is_set():
                raise Stopped() from None
    try:
        yield
    finally:
        lock.release()


def _download(
    url: str,
    blob: Path,
    shown: str,
    headers: dict[str, Any],
    size: int | None,
    expected: str,
    transfer: Transfer,
) -> None:
    partial = transfer.partial = partial_path(blob)
    blob.parent.mkdir(parents=True, exist_ok=True)
    # `shown`: the file's name in the repo, as errors name it (the blob is its digest).
    have = partial.stat().st_size if partial.exists() else 0
    if size is not None and have > size:  # not this file's bytes: start over
        partial.unlink()
        have = 0
    transfer.resumed_from = transfer.file_done = have
    _check_space(blob.parent, (size or 0) - have)
    hasher = _hash_of(partial, transfer)
    failures = 0
    while size is None or transfer.file_done < size:  # a complete partial needs no GET
        before = transfer.file_done
        try:
            hasher = _get(url, shown, partial, headers, hasher, transfer, size)
            break
        except _Cut as exc:  # cut, reset, timed out: resume from what we have
            failures = 0 if transfer.file_done > before else failures + 1
            if failures >= RETRIES:
                of = f" of {size}" if size is not None else ""
                raise LmspError(
                    f"The download of {shown} was cut {failures} times in a row without "
                    f"progress (the last time: {exc}); {transfer.file_done}{of} bytes are kept. "
                    + CUT_ADVICE,
                    code="download_interrupted",
                    status=502,
                    type="server_error",
                ) from exc
            log.info("download interrupted (%s); resuming from %d", exc, transfer.file_done)
            if transfer.stop.wait(min(2.0 ** (failures - 1), 8.0)):
                raise Stopped() from exc
    if size is not None and transfer.file_done != size:
        raise LmspError(
            f"The hub sent {transfer.file_done} bytes of a {size}-byte file. Pull again.",
            code="download_incomplete",
            status=502,
            type="server_error",
        )
    digest = hasher.hexdigest()
    if expected and digest != expected:
        partial.unlink(missing_ok=True)  # nothing runnable, nothing to resume from
        raise LmspError(
            f"The downloaded file's sha256 ({digest[:16]}…) differs from the digest the hub "
            f"published ({expected[:16]}…), so it was deleted. Pull it again; if this "
            "repeats, the mirror or network is altering the file.",
            code="digest_mismatch",
            status=502,
            type="server_error",
        )
    with partial.open("rb") as f:
        os.fsync(f.fileno())  # durable before it is named as a verified blob
    os.replace(partial, blob)


class _Cut(Exception):
    """The connection failed mid-way (reset, cut, timed out): resume from what we have."""


def _get(
    url: str,
    shown: str,
    partial: Path,
    headers: dict[str, Any],
    hasher: Any,
    transfer: Transfer,
    size: int | None,
) -> Any:
    """One GET from the partial file's end; returns the hash over the whole file so far.

    The body is read with the standard library, up to 1 MiB a read: B21 measured
    huggingface_hub's httpx session (64 KiB reads parsed by h11) at well under curl's speed
    on a fast link, and the file is the whole cost of a download."""
    have = transfer.file_done
    request = urllib.request.Request(
        url, headers={**headers, **({"Range": f"bytes={have}-"} if have else {})}
    )
    try:
        response = urllib.request.urlopen(request, timeout=READ_TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        with exc:
            raise LmspError(
                f"The hub answered HTTP {exc.code} to the download of {shown}. " + HUB_ERROR_ADVICE,
                code="hub_error",
                status=502,
                type="server_error",
            ) from exc
    except urllib.error.URLError as exc:
        # No connection at all (refused, no route, DNS: urllib wraps what fails before the
        # request is sent): the hub is gone, not a transfer cut mid-way, so say so at once.
        # The manager waits for the hub and says it does, instead of this loop's retries
        # spending some 15 s in silence first.
        raise hub_unreachable(_reason(exc)) from exc
    except (OSError, http.client.HTTPException) as exc:  # connected, then cut or silent
        raise _Cut(str(exc)) from exc
    with response:
        if have and response.status != 206:  # the server ignored the Range: start over
            partial.unlink(missing_ok=True)
            transfer.file_done = 0
            hasher = hashlib.sha256()
        hashing = _Pipelined(hasher)
        with _writing(partial) as out, hashing:
            written_since_flush = 0
            while True:
                if transfer.stop.is_set():
                    raise Stopped()
                try:
                    # What has arrived, up to 1 MiB, in one socket read: a slow link still
                    # reports progress and sees a cancel at once.
                    chunk = response.read1(READ_BUFFER)
                except (OSError, http.client.HTTPException) as exc:
                    raise _Cut(str(exc)) from exc
                if not chunk:
                    break
                _write_all(out, chunk)
                hashing.update(chunk)
                transfer.file_done += len(chunk)
                written_since_flush += len(chunk)
                if written_since_flush >= WRITEBACK_EVERY:
                    _start_writeback(out)
                    written_since_flush = 0
    if size is not None and transfer.file_done < size:
        raise _Cut(f"the connection closed after {transfer.file_done} of {size} bytes")
    return hasher


class _Pipelined:
    """sha256 of the chunks in a thread of its own, one chunk behind the network: hashlib
    releases the GIL, so hashing overlaps the next read (B21: the hash was a third of the
    time left after curl's)."""

    def __init__(self, hasher: Any) -> None:
        self.hasher = hasher
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="download-hash")
        self._pending: Future[None] | None = None

    def update(self, chunk: bytes) -> None:
        if self._pending is not None:
            self._pending.result()
        self._pending = self._pool.submit(self.hasher.update, chunk)

    def __enter__(self) -> _Pipelined:
        return self

    def __exit__(self, *_: object) -> None:
        try:
            if self._pending is not None:
                self._pending.result()
        finally:
            self._pool.shutdown()


def _write_all(out: BinaryIO, chunk: bytes) -> None:
    """`chunk` handed to the OS before it is counted as done: the file is unbuffered, so a
    progress event never names bytes that a kill -9 would lose from a buffer of ours (the
    download resumes from the bytes on disk, which must be at least what it reported)."""
    view = memoryview(chunk)
    while view:
        written = out.write(view)
        if not written:  # a regular file takes bytes or raises (ENOSPC...): never loop here
            raise OSError(errno.EIO, f"writing {getattr(out, 'name', 'the file')} took no bytes")
        view = view[written:]


def _start_writeback(out: BinaryIO) -> None:
    """Have the kernel start writing what is written so far, so the fsync at the end waits
    for the last stretch only instead of the whole file (and the page cache is spared)."""
    out.flush()
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


@contextlib.contextmanager
def _writing(partial: Path) -> Iterator[BinaryIO]:
    """The partial file opened for appending; a full disk deletes it (nothing half-written
    is left behind) and says so."""
    try:
        with partial.open("ab", buffering=0) as out:  # see _write_all
            yield out
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            partial.unlink(missing_ok=True)
            raise disk_full(partial.parent) from exc
        if exc.errno == errno.EFBIG:
            partial.unlink(missing_ok=True)
            raise too_large(partial.parent) from exc
        raise


def _hash_of(partial: Path, transfer: Transfer) -> Any:
    """The sha256 state over the bytes already on disk (a resumed download)."""
    hasher = hashlib.sha256()
    if not transfer.file_done:
        return hasher
    with partial.open("rb") as f:
        while chunk := f.read(HASH_CHUNK):
            if transfer.stop.is_set():
                raise Stopped()
            hasher.update(chunk)
    return hasher


def _check_space(folder: Path, needed: int) -> None:
    if needed > 0 and shutil.disk_usage(folder).free < needed:
        raise disk_full(folder, needed)


def disk_full(folder: Path, needed: int | None = None) -> LmspError:
    more = f" It needs {needed / (1 << 30):.2f} GiB more." if needed else ""
    return LmspError(
        f"The disk holding the Hugging Face cache ({folder}) is full.{more} Free some space "
        "(or point HF_HUB_CACHE at a larger disk) and pull again.",
        code="disk_full",
        status=507,
        type="server_error",
    )


def too_large(folder: Path) -> LmspError:
    """EFBIG: the file outgrew what the folder's file system (FAT32: 4 GB) or this process's
    file size limit (`ulimit -f`) allows; the disk may have room to spare."""
    return LmspError(
        f"The file is too large for the file system of the Hugging Face cache ({folder}): it "
        "holds no file this big (FAT32 stops at 4 GB), or `ulimit -f` limits file sizes here. "
        "Point HF_HUB_CACHE at a folder on another file system (ext4, NTFS, APFS, exFAT), or "
        "raise the limit, and pull again.",
        code="file_too_large",
        status=507,
        type="server_error",
    )


def remove_partial(transfer: Transfer) -> None:
    """Delete what a cancelled download left (its partial file), if any."""
    if transfer.partial is not None:
        transfer.partial.unlink(missing_ok=True)
