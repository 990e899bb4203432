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

import errno
import hashlib
import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lmsp_desktop.core.downloads.hub import HubFile, _hub_call, cache_dir, endpoint
from lmsp_desktop.core.errors import LmspError

log = logging.getLogger(__name__)
READ_TIMEOUT_S = 20.0  # a stalled connection is given up (and retried) after this
RETRIES = 5  # attempts in a row without a byte of progress before the task fails
HASH_CHUNK = 8 * 1024 * 1024


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
    if not blob.exists():
        headers: dict[str, Any] = build_hf_headers(token=token)
        if urlparse(meta.location).netloc != urlparse(url).netloc:
            headers.pop("authorization", None)  # a CDN's signed URL: the token stays home
        _download(meta.location, blob, headers, meta.size or file.size, expected, transfer)
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
    if revision != commit and not ref.exists():  # as hf_hub_download(revision=branch) does
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
    return Path(path)


def _download(
    url: str,
    blob: Path,
    headers: dict[str, Any],
    size: int | None,
    expected: str,
    transfer: Transfer,
) -> None:
    import httpx2

    partial = transfer.partial = partial_path(blob)
    blob.parent.mkdir(parents=True, exist_ok=True)
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
            hasher = _get(url, partial, headers, hasher, transfer)
            break
        except httpx2.TransportError as exc:  # cut, reset, timed out: resume from what we have
            failures = 0 if transfer.file_done > before else failures + 1
            if failures > RETRIES:
                raise LmspError(
                    f"The download of {blob.name[:12]}… was cut {failures} times without "
                    f"progress ({type(exc).__name__}); {transfer.file_done} bytes are kept. "
                    "Check the network and pull again: it continues from there.",
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


def _get(url: str, partial: Path, headers: dict[str, Any], hasher: Any, transfer: Transfer) -> Any:
    """One GET from the partial file's end; returns the hash over the whole file so far."""
    import httpx2
    from huggingface_hub import get_session, hf_raise_for_status

    have = transfer.file_done
    request_headers = {**headers, **({"Range": f"bytes={have}-"} if have else {})}
    timeout = httpx2.Timeout(READ_TIMEOUT_S, connect=10.0)
    with get_session().stream("GET", url, headers=request_headers, timeout=timeout) as response:
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        if have and response.status_code != 206:  # the server ignored the Range: start over
            partial.unlink(missing_ok=True)
            transfer.file_done = 0
            hasher = hashlib.sha256()
        try:
            with partial.open("ab") as out:
                for chunk in response.iter_bytes():
                    if transfer.stop.is_set():
                        raise Stopped()
                    out.write(chunk)
                    hasher.update(chunk)
                    transfer.file_done += len(chunk)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                partial.unlink(missing_ok=True)  # nothing half-written left behind
                raise disk_full(partial.parent) from exc
            raise
    return hasher


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
    more = f" It needs {needed / 1e9:.2f} GB more." if needed else ""
    return LmspError(
        f"The disk holding the Hugging Face cache ({folder}) is full.{more} Free some space "
        "(or point HF_HUB_CACHE at a larger disk) and pull again.",
        code="disk_full",
        status=507,
        type="server_error",
    )


def remove_partial(transfer: Transfer) -> None:
    """Delete what a cancelled download left (its partial file), if any."""
    if transfer.partial is not None:
        transfer.partial.unlink(missing_ok=True)
