"""Recording what a scan finds in the `models` table: every model file found (the demo, the
model folders, the other apps' stores) matched to the row it continues, new files inserted,
moved names repointed, changed and missing files marked, and the hash jobs that follow; and
the files a pull has just written."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sqlite3
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.discovery import (
    DEMO,
    FoundFile,
    SourceProblem,
    find_model_files,
    stat_file,
    with_parts,
)
from lmsp_desktop.core.models.hashing import HashJob
from lmsp_desktop.core.models.ids import slug_from_filename, unique_model_id
from lmsp_desktop.core.models.info import (
    CHANGED,
    INVALID,
    MISSING,
    UNVERIFIED,
    VERIFIED,
    ModelEvent,
)
from lmsp_desktop.core.models.scan_rows import (
    aliases_of,
    insert_values,
    match_rows,
    names_of,
    read_gone_or_meta,
    replaced_files,
    same_parts,
)
from lmsp_desktop.core.models.sources import find_in_sources
from lmsp_desktop.core.storage.db import Database

log = logging.getLogger(__name__)
T = TypeVar("T")
# A model's row pointed at a new file (values from scan_rows.insert_values without the id
# and the creation time, then the id): recorded afresh, its digest to be computed.
REPOINT = (
    "UPDATE models SET path = ?, size_bytes = ?, mtime_ns = ?, digest = NULL, state = ?,"
    " verified_at = NULL, architecture = ?, parameters = ?, quantization = ?,"
    " context_length = ?, meta = ? WHERE id = ?"
)

# What is at a changed model's path now: its size, the digest and error a verify read of an
# earlier file dropped (they were of another file).
OBSERVE_SIZE = (
    "UPDATE models SET meta = json_set(json_remove(coalesce(meta, '{}'), '$.observed_digest',"
    " '$.observed_error'), '$.observed_size_bytes', ?) WHERE id = ?"
)

UNOBSERVE = (
    "UPDATE models SET meta = json_remove(meta, '$.observed_digest', '$.observed_error',"
    " '$.observed_size_bytes') WHERE id = ?"
)


class ModelScanning:
    """The recording half of a scan of ModelRegistry (registry.py), which holds the state
    named below and runs the scans (`scan`, `start_scan`, `rescan_if_stale`) that call it."""

    db: Database
    folders: list[Path]
    sources: set[str]
    include_demo: bool
    problems: list[SourceProblem]
    _scan_lock: asyncio.Lock

    if TYPE_CHECKING:  # ModelRegistry's

        def _listed(self, row: Any) -> bool: ...

        async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T: ...

        def _emit(self, event: ModelEvent) -> None: ...

        async def _set_state(self, model_id: str, state: str) -> None: ...

    async def file_gone(self, model_id: str, path: Path) -> None:
        """A read of the model's file at `path` found none (FileNotFoundError: the memory
        estimate's header read, say): the model is recorded missing now, as the next scan
        would, if its row still names that file and the file is still gone. Left to the next
        scan, a file deleted behind the service's back kept its last word ("✓ verified", "✗ not
        a model") in the window, which does not rescan on its own, until Rescan or Verify."""
        row = await self.db.fetchone("SELECT path, state FROM models WHERE id = ?", (model_id,))
        if row is None or row["path"] != str(path) or row["state"] == MISSING:
            return
        if await asyncio.to_thread(stat_file, path) is None:
            log.info("%s: its file %s is gone", model_id, path)
            await self._set_state(model_id, MISSING)

    async def changed_under(self, model_id: str, size_now: int) -> None:
        """A run found the verified file of `model_id` changed (`size_now`: the bytes at its
        path now, every part of a split model): `changed`, with what is there now."""
        row = await self.db.fetchone("SELECT meta FROM models WHERE id = ?", (model_id,))
        if row is not None and json.loads(row["meta"] or "{}").get("observed_size_bytes") != (
            size_now
        ):
            await self._write(lambda conn: conn.execute(OBSERVE_SIZE, (size_now, model_id)).close())
        await self._set_state(model_id, CHANGED)

    def _find_files(self, demo: Path | None) -> list[FoundFile]:
        """Every model file, each once: the demo, the model folders, then the stores."""
        problems: list[SourceProblem] = []
        found = find_model_files(list(self.folders), [demo] if demo else [], problems)
        found = [dataclasses.replace(f, source=DEMO) if f.path == demo else f for f in found]
        found += find_in_sources(self.sources, problems)
        # A split model's other parts are stat'ed too (a scan compares them as it does the
        # first); one with a part gone is not listed, its row missing.
        found = [f for f in (with_parts(f, problems) for f in found) if f is not None]
        for problem in problems:
            log.warning("%s", problem.message)
        self.problems = problems
        seen: set[str] = set()
        unique: list[FoundFile] = []
        for file in found:
            real = os.path.realpath(file.path)
            if real not in seen:
                seen.add(real)
                unique.append(file)
        return unique

    async def _discover_and_record(self) -> list[HashJob]:
        demo = demo_model_path() if self.include_demo else None
        found = await asyncio.to_thread(self._find_files, demo)
        rows = await self.db.fetchall("SELECT * FROM models")
        taken = {r["id"] for r in rows}
        matched = match_rows(rows, found, demo)
        inserts: list[tuple[Any, ...]] = []
        updates: list[tuple[str, int, int, str]] = []  # state, size, mtime, id
        repoints: list[tuple[Any, ...]] = []
        refound: list[tuple[str, str]] = []  # meta, id: where or by what it was found changed
        observed: list[tuple[int, str]] = []  # size now, id: a verified file changed under it
        unobserved: list[tuple[str]] = []
        jobs: list[HashJob] = []
        for file, row in matched.pairs:
            if row is None:
                meta = await asyncio.to_thread(read_gone_or_meta, file.path)
                if meta is None:
                    continue  # deleted since it was listed: the next scan finds it if back
                base = (names_of(file, demo) or [slug_from_filename(file.path.name)])[0]
                model_id = unique_model_id(base, taken)
                taken.add(model_id)
                inserts.append(insert_values(model_id, file, meta))
                jobs.append(HashJob(model_id, from_scan=True))
                continue
            if row["path"] != str(file.path):
                # Its name now leads to another file: the demo package moved (a new venv), an
                # Ollama tag or a Hugging Face repo was updated to a new blob or revision. The
                # id follows the name, the file verified afresh (a new file, not a changed one).
                meta = await asyncio.to_thread(read_gone_or_meta, file.path)
                if meta is None:
                    continue  # the new file was deleted since it was listed: left as it was
                values = insert_values(row["id"], file, meta)
                repoints.append((*values[1:-1], row["id"]))
                jobs.append(HashJob(row["id"], from_scan=True))
                continue
            aliases = aliases_of(row["id"], file)
            if file.folder is not None or aliases or '"aliases"' in (row["meta"] or ""):
                meta_now = json.loads(row["meta"]) if row["meta"] else {}
                meta_found = {k: v for k, v in meta_now.items() if k != "aliases"}
                if file.folder is not None:
                    meta_found["folder"] = str(file.folder)
                if aliases:
                    meta_found["aliases"] = aliases
                if meta_found != meta_now:  # a repoint below keeps it
                    refound.append((json.dumps(meta_found), row["id"]))
            same = (
                row["size_bytes"] == file.size_bytes
                and row["mtime_ns"] == file.mtime_ns
                and same_parts(json.loads(row["meta"]) if row["meta"] else {}, file.parts)
            )
            state, hashed_before = row["state"], row["digest"] is not None
            if state in (VERIFIED, CHANGED) and not same:
                # What is at its path now, beside the verified file's facts it keeps: the
                # Models page showed the old size (and its memory estimate) as the file's.
                size_now = file.size_bytes + sum(size for size, _ in file.parts)
                if json.loads(row["meta"] or "{}").get("observed_size_bytes") != size_now:
                    observed.append((size_now, row["id"]))
            elif state == CHANGED and "observed_size_bytes" in (row["meta"] or ""):
                unobserved.append((row["id"],))  # the verified file is back: none other seen
            if state == VERIFIED and not same:
                updates.append((CHANGED, row["size_bytes"], row["mtime_ns"], row["id"]))
            elif state in (UNVERIFIED, MISSING) and not hashed_before:
                updates.append((UNVERIFIED, file.size_bytes, file.mtime_ns, row["id"]))
                jobs.append(HashJob(row["id"], from_scan=True))
            elif state in (UNVERIFIED, MISSING) and same:
                # Back (or never confirmed) with the recorded size and mtime: hash and compare.
                updates.append((UNVERIFIED, file.size_bytes, file.mtime_ns, row["id"]))
                jobs.append(HashJob(row["id"], from_scan=True))
            elif state in (INVALID, MISSING) and not same:
                # Replaced (a finished download, a fixed copy), or back after it was deleted
                # (downloaded again): a new file, read and verified afresh (a re-download
                # showed "changed"). A published digest still has to match.
                meta = await asyncio.to_thread(read_gone_or_meta, file.path)
                if meta is None:  # deleted since it was listed: missing, not "not a model"
                    if state != MISSING:
                        updates.append((MISSING, row["size_bytes"], row["mtime_ns"], row["id"]))
                    continue
                values = insert_values(row["id"], file, meta)
                repoints.append((*values[1:-1], row["id"]))
                jobs.append(HashJob(row["id"], from_scan=True))
            elif state in (UNVERIFIED, MISSING):
                updates.append((CHANGED, row["size_bytes"], row["mtime_ns"], row["id"]))
            # VERIFIED and same: nothing to read. CHANGED stays so until verified on purpose.
        for row in matched.gone:  # recorded, but not in any model folder any more
            if row["state"] != MISSING and self._listed(row):
                updates.append((MISSING, row["size_bytes"], row["mtime_ns"], row["id"]))
        dropped = [(r["id"],) for r in matched.dropped]
        for (model_id,) in dropped:
            log.info("%s: its name or file is another model's now; forgotten", model_id)
        if inserts or updates or repoints or refound or dropped or observed or unobserved:

            def work(conn: sqlite3.Connection) -> None:
                conn.executemany("DELETE FROM models WHERE id = ?", dropped)
                conn.executemany("UPDATE models SET meta = ? WHERE id = ?", refound)
                # Paths are UNIQUE: the files repointed rows leave may be taken by another
                # (a new row for the blob the old tag still names, two names swapping files).
                conn.executemany(
                    "UPDATE models SET path = '(moving) ' || id WHERE id = ?",
                    [(values[-1],) for values in repoints],
                )
                conn.executemany(REPOINT, repoints)  # after: its meta is the new file's
                conn.executemany(
                    "INSERT INTO models (id, path, size_bytes, mtime_ns, digest, state,"
                    " verified_at, architecture, parameters, quantization, context_length,"
                    " meta, created_at) VALUES (?, ?, ?, ?, NULL, ?, NULL, ?, ?, ?, ?, ?, ?)",
                    inserts,
                )
                conn.executemany(
                    "UPDATE models SET state = ?, size_bytes = ?, mtime_ns = ? WHERE id = ?",
                    updates,
                )
                conn.executemany(OBSERVE_SIZE, observed)
                conn.executemany(UNOBSERVE, unobserved)

            await self._write(work)
        for (model_id,) in dropped:
            self._emit(ModelEvent("removed", model_id))
        for values in inserts:
            self._emit(ModelEvent("state", values[0], UNVERIFIED))
        for values in repoints:
            self._emit(ModelEvent("state", values[-1], UNVERIFIED))
        for state, _, _, model_id in updates:
            self._emit(ModelEvent("state", model_id, state))
        return jobs

    async def downloaded(self, paths: Collection[Path]) -> None:
        """Files a pull has just written, each checked against the digest the hub published.

        A model whose file one of them replaced (its cache folder deleted and the model
        pulled again: the same path, a new file) is recorded as a new file, verified afresh
        by the next scan (against the published digest again), as a scan does with a missing
        file that came back different. Left to the scan alone it read as a verified file
        changed under the model, refused until verified by hand, though the user asked for
        this very file and the download checked it. A file whose size and mtime are the ones
        recorded (its blob was there already: nothing was written) is left as it is."""
        if not paths:
            return
        async with self._scan_lock:
            rows = await self.db.fetchall("SELECT * FROM models")
            repoints: list[tuple[Any, ...]] = []
            for row, file in await asyncio.to_thread(replaced_files, rows, paths):
                meta = await asyncio.to_thread(read_gone_or_meta, file.path)
                if meta is None:
                    continue  # deleted since it was written: the next scan records it missing
                values = insert_values(row["id"], file, meta)
                repoints.append((*values[1:-1], row["id"]))
                log.info("%s: pulled again, a new file to verify", file.path)
            if repoints:
                await self._write(lambda conn: conn.executemany(REPOINT, repoints).close())
        for values in repoints:
            self._emit(ModelEvent("state", values[-1], UNVERIFIED))
