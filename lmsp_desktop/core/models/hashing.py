"""Hashing model files for the registry: a scan's new files and "verify now", one file at a
time in a worker thread, with progress, the per-machine digest cache, and the result
recorded (verified, changed, invalid, missing) once the database is free."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lmsp_desktop.core.errors import DatabaseLockedError, invalid
from lmsp_desktop.core.models import messages
from lmsp_desktop.core.models.digest_cache import DigestCache
from lmsp_desktop.core.models.digests import HashCancelled, sha256_file
from lmsp_desktop.core.models.discovery import stat_file
from lmsp_desktop.core.models.info import (
    CHANGED,
    HASHING,
    INVALID,
    MISSING,
    OBSERVED,
    PARTS,
    PARTS_SIZE,
    UNVERIFIED,
    VERIFIED,
    ModelEvent,
    ModelInfo,
    source_of,
)
from lmsp_desktop.core.models.scan_gate import HashProgress, ScanGate
from lmsp_desktop.core.models.scan_rows import WHERE_FOUND, read_gone_or_meta, split_parts
from lmsp_desktop.core.models.sources import publisher_of
from lmsp_desktop.core.storage.db import Database

log = logging.getLogger(__name__)
T = TypeVar("T")
# A hash's result is written again this long after another program held the database past
# the busy timeout (each try waits that long already).
LOCKED_RETRY_S = 1.0


@dataclass
class HashJob:
    model_id: str
    # True: the scan found a file never hashed or back after going missing; skip it if
    # someone verified it meanwhile. False: "verify now", always rehash.
    from_scan: bool
    accept_new: bool = False


class ModelHashing:
    """The hashing half of ModelRegistry (registry.py), which holds the state named below:
    runs hash jobs one at a time (`_hash_lock`), reports progress, takes an unchanged file's
    digest from the digest cache, and records each result."""

    db: Database
    gate: ScanGate
    digests: DigestCache | None
    chunk_size: int
    bytes_hashed: int
    _hash_lock: asyncio.Lock
    _hashing: set[str]
    _stop: threading.Event

    if TYPE_CHECKING:  # ModelRegistry's

        async def get(self, model_id: str) -> ModelInfo: ...

        async def _set_state(self, model_id: str, state: str) -> None: ...

        async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        def _emit(self, event: ModelEvent) -> None: ...

    async def verify(self, model_id: str, *, accept_new: bool = False) -> ModelInfo:
        """Rehash the file now. Same digest as recorded → `verified`; a different digest
        leaves a verified model's file `changed` (the new digest is kept in meta as
        `observed_digest`) unless `accept_new`, which records the new contents (and header)
        as the model's. A file never verified is taken as new (no question to ask)."""
        info = await self.get(model_id)
        if info.source == "upstream":
            upstream = info.id.partition("/")[0]
            raise invalid(
                f"{info.id} is a model of the upstream server {upstream}: its file is on that "
                "machine, not this one, so there is nothing to verify here.",
                "model",
                code="model_not_local",
            )
        pending = info.state in (UNVERIFIED, HASHING) and self.gate.hash_queued(info.id)
        if pending and not accept_new:
            # Never verified and a scan is hashing it (a new 8 GiB file, say): that hash is
            # the answer; a second one queued behind it read the whole file again.
            await self.gate.wait_hashed(info.id)
        else:
            await self._run_jobs([HashJob(info.id, from_scan=False, accept_new=accept_new)])
        info = await self.get(model_id)
        if info.state == MISSING:
            raise messages.not_runnable(info)
        return info

    async def _run_jobs(self, jobs: list[HashJob]) -> None:
        left = list(jobs)
        try:
            sizes = await self._sizes([j.model_id for j in jobs])
            progress = HashProgress(total_bytes=sum(sizes.values()))
            while left:
                job = left[0]
                async with self._hash_lock:
                    await self._hash_one(job, progress)
                progress.finish_file(sizes.get(job.model_id, 0))
                self._settled(left.pop(0))
        finally:
            for job in left:  # abandoned (shutdown): runs waiting for them see it unverified
                self._settled(job)

    def _settled(self, job: HashJob) -> None:
        if job.from_scan:  # the scan queued it through the gate; a verify did not
            self.gate.hash_done(job.model_id)

    async def _sizes(self, ids: list[str]) -> dict[str, int]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = await self.db.fetchall(f"SELECT id, path FROM models WHERE id IN ({marks})", ids)
        return await asyncio.to_thread(
            lambda: {r["id"]: _total(_stats(split_parts(Path(r["path"])))) for r in rows}
        )

    async def _hash_one(self, job: HashJob, progress: HashProgress) -> None:
        row = await self.db.fetchone("SELECT * FROM models WHERE id = ?", (job.model_id,))
        if row is None or (job.from_scan and row["state"] != UNVERIFIED):
            return  # deleted, or settled by a verify that ran meanwhile
        path = Path(row["path"])
        # A split model is every one of its parts: each is hashed (part 1 alone was, so a
        # corrupted or deleted part 3 read "✓ verified").
        parts = split_parts(path)
        stats = await asyncio.to_thread(_stats, parts)
        before = [st for st in stats if st is not None]
        if len(before) < len(parts):
            await self._set_state(job.model_id, MISSING)
            return
        digests = self.digests
        if job.from_scan and digests is not None:
            kept = await asyncio.to_thread(
                lambda: [digests.get(p, st) for p, st in zip(parts, before, strict=True)]
            )
            if None not in kept:
                log.info("%s: digest of the unchanged file from %s", path, digests.path)
                cached = [d for d in kept if d is not None]
                await self._patiently(
                    job.model_id, lambda: self._record_hash(job, row, cached, before, before)
                )
                return
        total = _total(before)
        log.info("hashing %s (%d bytes)", path, total)
        loop = asyncio.get_running_loop()
        done = 0
        next_report = 0
        step = max(self.chunk_size, total // 100)

        def on_chunk(n: int) -> None:  # in the worker thread
            nonlocal done, next_report
            self.bytes_hashed += n
            done += n
            if done >= next_report or done >= total:
                next_report = done + step
                event = progress.event(job.model_id, done, total)
                loop.call_soon_threadsafe(self._emit, event)

        def hash_parts() -> tuple[list[str], list[os.stat_result | None]]:
            hashed = [
                sha256_file(
                    part,
                    chunk_size=self.chunk_size,
                    progress=on_chunk,
                    should_stop=self._stop.is_set,
                )
                for part in parts
            ]
            return hashed, _stats(parts)

        # By every name the model goes by: a lookup by an alias says "hashing" too.
        names = [job.model_id, *ModelInfo.from_row(row).aliases]
        self._hashing.update(names)
        start = progress.event(job.model_id, 0, total)
        self._emit(dataclasses.replace(start, kind="state"))
        # "hashing" until its result is recorded: between the two the model read
        # `unverified`, and a client waiting for the hash to end (a test under load, the
        # fresh-clone CI of ffde5c5) went on with a model a rescan then hashed again.
        try:
            found: list[str] | None
            after: list[os.stat_result | None] | None
            try:
                found, after = await asyncio.to_thread(hash_parts)
            except HashCancelled:
                return
            except OSError as exc:  # a part deleted as it was read, say
                log.warning("cannot read model file %s: %s", path, exc)
                found, after = None, None
            await self._patiently(
                job.model_id, lambda: self._record_hash(job, row, found, before, after)
            )
        finally:
            self._hashing.difference_update(names)

    async def _patiently(self, model_id: str, write: Callable[[], Awaitable[None]]) -> None:
        """A hash's result, written once another program lets go of the database. Lost, the
        file stayed unverified, hence not runnable, until the next scan (a tool holding the
        database while the start-up hash finished made every run of the model fail)."""
        while True:
            try:
                return await write()
            except DatabaseLockedError:
                if self._stop.is_set():
                    raise
                log.warning("the hash of %s waits for the database to be free", model_id)
                await asyncio.sleep(LOCKED_RETRY_S)

    async def _record_hash(
        self,
        job: HashJob,
        row: Any,
        found: list[str] | None,
        before: list[Any],
        after: list[Any] | None,
    ) -> None:
        """Records the digests `found` of the model's file (a split model: of each part, in
        order; its `digest` is the first's, the others are kept in meta PARTS)."""
        model_id = job.model_id
        if after is None or None in after or found is None:
            await self._set_state(
                model_id, MISSING if after is None or None in after else UNVERIFIED
            )
            return
        if [_identity(st) for st in after] != [_identity(st) for st in before]:
            # Written to while we read it (a download still in progress): no digest to trust
            # yet; the next scan tries again.
            await self._set_state(model_id, UNVERIFIED)
            return
        paths = split_parts(Path(row["path"]))
        if self.digests is not None:
            # The file as it was both before and after the read (inode too: not replaced).
            for part, st, part_digest in zip(paths, after, found, strict=True):
                await asyncio.to_thread(self.digests.put, part, st, part_digest)
        digest, others = found[0], found[1:]
        meta: dict[str, Any] = json.loads(row["meta"]) if row["meta"] else {}
        recorded = row["digest"]
        kept_parts = meta.get(PARTS)
        recorded_others = (
            [p.get("digest") for p in kept_parts if isinstance(p, dict)]
            if isinstance(kept_parts, list)
            else []
        )
        # A split model recorded before its parts were hashed has no digests of them yet:
        # they are taken as they are now (its first part still has to match).
        same = recorded == digest and (
            recorded_others == others or all(d is None for d in recorded_others)
        )
        now = int(time.time())
        # A file never verified has no digest to be held to (a file that was not a model,
        # replaced by another): verify reads it as a new file, as a rescan does, instead of
        # asking to accept it as a verified model's replacement.
        new_file = recorded is not None and not same and (job.accept_new or not row["verified_at"])
        if recorded is None or same or new_file:
            header = None
            if new_file or (len(paths) > 1 and not same):
                header = await asyncio.to_thread(read_gone_or_meta, Path(row["path"]))
                if header is None:  # deleted since it was hashed: missing, not "not a model"
                    await self._set_state(model_id, MISSING)
                    return
                kept: dict[str, Any] = {k: meta[k] for k in WHERE_FOUND if k in meta}
                meta = {**header[1], **kept}
            for observed in OBSERVED:
                meta.pop(observed, None)
            if len(paths) > 1:
                meta[PARTS_SIZE] = sum(st.st_size for st in after)
                meta[PARTS] = [
                    {
                        "name": part.name,
                        "size_bytes": st.st_size,
                        "mtime_ns": st.st_mtime_ns,
                        "digest": part_digest,
                    }
                    for part, st, part_digest in zip(paths[1:], after[1:], others, strict=True)
                ]
            published = meta.get("published_digest")
            if published and published != digest and not meta.get("error"):
                meta["error"] = (
                    f"its content differs from the digest {publisher_of(source_of(model_id, meta))}"
                    f" published ({published}; this file hashes to {digest}): a damaged or"
                    " tampered download. Download it again with the app it came from"
                )
            # Hashed is not checked: a file whose header says it cannot load (or whose content
            # is not what its publisher announced) is never verified.
            state, when = (INVALID, None) if meta.get("error") else (VERIFIED, now)
            first = after[0]

            def verified(conn: sqlite3.Connection) -> None:
                conn.execute(
                    "UPDATE models SET digest = ?, state = ?, verified_at = ?, size_bytes = ?,"
                    " mtime_ns = ?, meta = ? WHERE id = ?",
                    (
                        digest,
                        state,
                        when,
                        first.st_size,
                        first.st_mtime_ns,
                        json.dumps(meta),
                        model_id,
                    ),
                )
                if header is not None:
                    conn.execute(
                        "UPDATE models SET architecture = ?, parameters = ?, quantization = ?,"
                        " context_length = ? WHERE id = ?",
                        (*header[0], model_id),
                    )

            await self._write(verified)
            self._emit(ModelEvent("state", model_id, state))
            return
        meta["observed_digest"] = digest
        meta["observed_size_bytes"] = sum(st.st_size for st in after)
        # A file that is not a whole model (a cut copy, an unfinished download) is no
        # candidate to accept as the model's new file: its reason is said instead.
        now_there = await asyncio.to_thread(read_gone_or_meta, Path(row["path"]))
        if now_there is None:  # deleted since it was hashed
            await self._set_state(model_id, MISSING)
            return
        observed_error = now_there[1].get("error")
        if observed_error:
            meta["observed_error"] = observed_error
        else:
            meta.pop("observed_error", None)
        await self._write(
            lambda conn: conn.execute(
                "UPDATE models SET state = ?, meta = ? WHERE id = ?",
                (CHANGED, json.dumps(meta), model_id),
            ).close()
        )
        self._emit(ModelEvent("state", model_id, CHANGED))


def _stats(paths: list[Path]) -> list[os.stat_result | None]:
    return [stat_file(p) for p in paths]


def _total(stats: Sequence[os.stat_result | None]) -> int:
    return sum(st.st_size for st in stats if st is not None)


def _identity(st: Any) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino)
