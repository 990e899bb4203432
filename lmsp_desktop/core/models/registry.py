"""The model registry: model folders scanned into the `models` table, digests and states."""

from __future__ import annotations

import asyncio
import builtins
import copy
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.listeners import notify
from lmsp_desktop.core.models import messages
from lmsp_desktop.core.models.digest_cache import DigestCache
from lmsp_desktop.core.models.digests import CHUNK_SIZE
from lmsp_desktop.core.models.discovery import DEMO, FOLDER, SourceProblem, stat_file
from lmsp_desktop.core.models.hashing import HashJob, ModelHashing
from lmsp_desktop.core.models.ids import check_model_id, model_not_found
from lmsp_desktop.core.models.info import (
    CHANGED,
    HASHING,
    MISSING,
    UNVERIFIED,
    VERIFIED,
    ModelEvent,
    ModelInfo,
    source_of,
)
from lmsp_desktop.core.models.scan_gate import ScanGate
from lmsp_desktop.core.models.scan_rows import parts_now, same_parts
from lmsp_desktop.core.models.scanning import ModelScanning
from lmsp_desktop.core.storage.db import Database

__all__ = ["ModelEvent", "ModelInfo", "ModelRegistry"]

log = logging.getLogger(__name__)
T = TypeVar("T")
# A lookup of a name no model has, /api/tags and GET /v1/models look in the folders and stores
# again when the last scan began this long ago: a model pulled with the ollama CLI meanwhile
# answers at once, as in Ollama; a scan that finds nothing new costs 5-30 ms (B20).
RESCAN_AFTER_S = 2.0
LATEST = ":latest"

# The row an alias names (a missing row's stale alias last).
ALIAS_ROW = (
    "SELECT models.* FROM models, json_each(models.meta, '$.aliases') AS alias"
    " WHERE instr(models.meta, '\"aliases\"') > 0 AND alias.value = ?"
    " ORDER BY models.state = 'missing' LIMIT 1"
)


class ModelRegistry(ModelScanning, ModelHashing):
    """Keeps the `models` table in step with the model folders.

    A scan stats every `*.gguf` file and reads nothing from a file whose size and mtime are
    unchanged; new files are hashed one at a time in a worker thread. A verified file whose
    size or mtime moved becomes `changed` and is refused until verified again; a file that
    disappeared becomes `missing`. Client-supplied ids are only looked up, never joined into
    paths. Recording what a scan finds is ModelScanning's (scanning.py); the hashing and
    "verify now" are ModelHashing's (hashing.py).
    """

    def __init__(
        self,
        db: Database,
        folders: list[Path],
        *,
        include_demo: bool = True,
        chunk_size: int = CHUNK_SIZE,
        sources: Collection[str] = (),
        digests: DigestCache | None = None,
    ) -> None:
        self.db = db
        # The digests of files this machine verified from any data folder (the app passes
        # the per-machine one): a scan takes an unchanged file's digest from it instead of
        # reading the whole file again; "verify now" always reads.
        self.digests = digests
        self.folders: list[Path] = []
        for folder in folders:
            resolved = Path(folder).expanduser().resolve()
            if resolved not in self.folders:
                self.folders.append(resolved)
        self.include_demo = include_demo
        self.chunk_size = chunk_size
        # The other apps' stores looked in (LM Studio, Ollama, the Hugging Face cache; the app
        # passes those its settings enable, sources.SOURCES by default); models of a store
        # switched off are kept in the table (with their digests) but not listed.
        self.sources: set[str] = set(sources)
        # What the last scan could not list, and why (shown on the Models page, logged).
        self.problems: list[SourceProblem] = []
        self.listeners: list[Callable[[ModelEvent], None]] = []
        self.bytes_hashed = 0  # every byte read for hashing, ever (tests and benches read it)
        self._scan_lock = asyncio.Lock()
        self._hash_lock = asyncio.Lock()  # one file at a time: hashing is disk-bound
        self._hashing: set[str] = set()
        self._stop = threading.Event()
        self._background: set[asyncio.Task[None]] = set()
        self.gate = ScanGate()  # lookups and runs wait for what a scan has not settled
        self.scanned = False  # a scan has recorded the files at least once in this run
        # The service and the window follow the stores (rescan_if_stale), from start_scan on;
        # a command's offline lookup does not.
        self.follows_stores = False
        self.rescan_after_s = RESCAN_AFTER_S
        self._scan_began = float("-inf")  # time.monotonic() of the last scan's discovery
        self._rescan: asyncio.Task[None] | None = None
        # Models on upstream servers (core.upstreams.catalog.UpstreamCatalog), listed and
        # looked up as `<upstream>/<model>` beside the local files.
        self.upstreams: Any = None
        # id → its `models` row as last read: every create looks its model up, and a read
        # through the reader thread was a tenth of a create's CPU (B1). Only this class
        # writes the table, and each of its writes forgets them all (_write).
        self._rows: dict[str, sqlite3.Row] = {}
        # The ModelInfo built from each kept row (B1: its JSON and Path parsed per create),
        # with the store set, folder list and hashing flag it was built under; valid while
        # the row is.
        self._infos: dict[str, tuple[sqlite3.Row, set[str], list[Path], bool, ModelInfo]] = {}
        self._rows_generation = 0  # moves on at every forget: a read begun before is not kept

    # -- reading -------------------------------------------------------------------------
    async def list_models(self) -> list[ModelInfo]:
        """Every model: the local files, then the upstreams' models."""
        await self.gate.wait_recorded()  # not a half-recorded list during a scan
        rows = await self.db.fetchall("SELECT * FROM models ORDER BY id")
        local = [
            ModelInfo.from_row(r, hashing=r["id"] in self._hashing) for r in rows if self._listed(r)
        ]
        return local + (self.upstreams.infos() if self.upstreams is not None else [])

    def known(self, model_id: str) -> ModelInfo | None:
        """What `get` answers when memory has it, without awaiting (B1: `get` and its caller
        were two coroutines per create): a local model whose row and info are kept and no
        scan is recording it. None: ask `get` (it answers, or raises its 404)."""
        if self.upstreams is not None and self.upstreams.owns(model_id):
            return None
        if isinstance(model_id, str):
            model_id = model_id.lower()
        row = self._rows.get(model_id)
        if row is None or (self.gate.recording and not self._listed(row)):
            return None
        kept = self._infos.get(model_id)
        if (
            kept is not None
            and kept[0] is row
            and kept[1] is self.sources
            and kept[2] is self.folders
            and kept[3] == (model_id in self._hashing)
        ):
            return kept[4].__copy__()  # a caller may set its state (path_for_run)
        return None

    async def get(self, model_id: str) -> ModelInfo:
        # An upstream's name before the slash wins, as in the runner (`gpu/llama-3-70b`);
        # other ids with slashes are local (`bartowski/qwen2.5-7b-instruct-gguf:q4_k_m`).
        if self.upstreams is not None and self.upstreams.owns(model_id):
            info: ModelInfo = self.upstreams.info(model_id)  # 404 naming what is missing
            return info
        if isinstance(model_id, str):
            model_id = model_id.lower()  # ids are lowercase; `Qwen2.5:7B` names the same model
        row = self._rows.get(model_id)
        scanning = False
        asked_at = None
        if row is None:
            check_model_id(model_id)
            asked_at = time.monotonic()
            # A scan recording when the read began, or begun meanwhile, may have committed
            # the row just after the read: its end is waited for and the row read again.
            scanning, begun = self.gate.recording, self.gate.begun
            row = await self._read_row(model_id)
            scanning = scanning or self.gate.begun != begun
        # The gate first: _listed reads the row's meta JSON, on every create (B1).
        if (scanning or self.gate.recording) and (row is None or not self._listed(row)):
            await self.gate.wait_recorded()  # it may be among the files being recorded
            row = await self._read_row(model_id)
        hashing = model_id in self._hashing
        kept = self._infos.get(model_id)
        if (
            kept is not None
            and kept[0] is row
            and kept[1] is self.sources
            and kept[2] is self.folders
            and kept[3] == hashing
        ):
            return kept[4].__copy__()  # a caller may set its state (path_for_run)
        if (row is None or not self._listed(row)) and await self.rescan_if_stale(asked_at):
            row = await self._read_row(model_id)  # pulled into a store since the last scan?
            hashing = model_id in self._hashing
        if row is None or not self._listed(row):
            if self.upstreams is not None and "/" in model_id:
                self.upstreams.info(model_id)  # says which upstream is missing
            raise model_not_found(model_id, await self._other_tags(model_id))
        info = ModelInfo.from_row(row, hashing=hashing)
        if self._rows.get(model_id) is row:
            self._infos[model_id] = (row, self.sources, self.folders, hashing, info)
        return copy.copy(info)

    async def _read_row(self, model_id: str) -> sqlite3.Row | None:
        """The row of the model `model_id` names: its id, else one of its aliases (the other
        tags of an Ollama blob: `smollm2:latest` of `smollm2:135m`)."""
        generation = self._rows_generation
        row = await self._row_named(model_id)
        if row is None and ":" not in model_id.rpartition("/")[2]:
            # No tag means `:latest`, as in Ollama, on every API: `smollm2` is the model
            # tagged `smollm2:latest` (an id or an alias) when no model's id is `smollm2`.
            # Kept under the name asked, so the next lookup of it is a dict hit (B1).
            row = await self._row_named(model_id + LATEST)
        if row is not None and generation == self._rows_generation:
            self._rows[model_id] = row
        return row

    async def _row_named(self, name: str) -> sqlite3.Row | None:
        row = await self.db.fetchone("SELECT * FROM models WHERE id = ?", (name,))
        if row is None:
            row = await self.db.fetchone(ALIAS_ROW, (name,))
        return row

    async def _other_tags(self, model_id: str) -> builtins.list[str]:
        """The names of the models listed here with `model_id`'s name and another tag (asked
        for `qwen2.5`, the store's `qwen2.5:7b`), for its 404. Read only on the way to one."""
        base = model_id.rpartition(":")[0] if ":" in model_id.rpartition("/")[2] else model_id
        return sorted(
            name
            for info in await self.list_models()
            for name in info.names
            if name.startswith(base + ":") and name != model_id
        )

    async def path_for_run(self, model_id: str) -> Path:
        """The file to load for `model_id`, after checking it is still the verified file.
        A file a scan is recording or hashing is waited for, not refused."""
        await self.gate.wait_recorded()
        info = await self.get(model_id)
        if info.state in (UNVERIFIED, HASHING):  # HASHING: its hash is under way right now
            await self.gate.wait_hashed(info.id)
            info = await self.get(model_id)
        if info.state != VERIFIED:
            raise messages.not_runnable(info)
        # A split model's other parts too: one deleted or cut since it was verified read
        # "verified" until llama.cpp failed to load it, naming the first part.
        st, parts = await asyncio.to_thread(lambda: (stat_file(info.path), parts_now(info.path)))
        if st is None or parts is None:
            await self._set_state(info.id, MISSING)  # the model's, not the name asked
            info.state = MISSING
            raise messages.not_runnable(info)
        recorded = info.size_bytes if info.file_bytes is None else info.file_bytes
        if (
            st.st_size != recorded
            or st.st_mtime_ns != info.mtime_ns
            or not same_parts(info.meta, parts)
        ):
            await self.changed_under(info.id, st.st_size + sum(size for size, _ in parts))
            info.state = CHANGED
            raise messages.not_runnable(info)
        return info.path

    # -- folders and scanning ------------------------------------------------------------
    async def add_folder(self, folder: Path, *, wait: bool = True) -> None:
        """Scan `folder` from now on; `wait=False` returns once its files are recorded and
        hashes them in the background (see `scan`)."""
        resolved = await asyncio.to_thread(lambda: Path(folder).expanduser().resolve())
        if not await asyncio.to_thread(resolved.is_dir):
            raise invalid(
                f"The model folder {resolved} does not exist or is not a folder. "
                "Choose an existing folder that holds .gguf files.",
                "folder",
                code="folder_not_found",
            )
        if resolved not in self.folders:
            self.folders = [*self.folders, resolved]  # a new list: lookups kept are rechecked
        await self.scan(wait=wait)

    async def scan(self, *, wait: bool = True) -> None:
        """Record new, changed and missing files, then hash the files that need it.

        With `wait=False` it returns once the files are recorded (listed as `hashing`, not
        yet runnable) and hashes in a background task, so a service can listen meanwhile.
        """
        self.gate.begin_recording()
        await self._scan(wait=wait)

    def start_scan(self) -> None:
        """The start-up scan, in the background (unless this run has scanned already): the
        service listens meanwhile; lookups wait for the recording, runs for the hashing.
        From now on the registry follows the stores (rescan_if_stale)."""
        self.follows_stores = True
        if self.scanned:
            return
        self.gate.begin_recording()  # before the task's first step: runs wait from now
        task = asyncio.create_task(self._scan(wait=True))
        self._background.add(task)
        task.add_done_callback(self._scan_done)

    async def rescan_if_stale(self, asked_at: float | None = None) -> bool:
        """Look in the folders and stores again if the last scan began `rescan_after_s` ago or
        more, for a model added to a store meanwhile (Ollama reads its manifests at every
        request: a model pulled with its CLI is there at once). Callers asking while it runs
        share it. It returns once the files are recorded (new ones are hashed in the
        background: a run waits for that). True if a scan ran; only in a registry that
        follows the stores (the service's), never on a known model's lookup. `asked_at`
        (time.monotonic()) is when the caller's lookup began: a scan begun since then has
        looked already, and none runs for it."""
        if not self.follows_stores or not self.scanned:
            return False
        task = self._rescan
        if task is None:
            if time.monotonic() - self._scan_began < self.rescan_after_s:
                return False
            if asked_at is not None and self._scan_began >= asked_at:
                # A scan looked in the stores after the caller's lookup began (the lookup
                # waited for it to record): another would find what it found.
                return False
            task = self._rescan = asyncio.create_task(self._rescan_now())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        await asyncio.shield(task)
        return True

    async def _rescan_now(self) -> None:
        try:
            self.gate.begin_recording()
            await self._scan(wait=False)
        except Exception:  # the lookup answers as it stands; the next one tries again
            log.warning("looking in the model folders and stores again failed", exc_info=True)
        finally:
            self._rescan = None

    def _scan_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("the model scan failed", exc_info=task.exception())

    async def _scan(self, *, wait: bool) -> None:
        """`scan` once the gate says a scan is recording."""
        jobs: builtins.list[HashJob] = []
        try:
            async with self._scan_lock:
                self._scan_began = time.monotonic()
                jobs = await self._discover_and_record()
            self.scanned = True
        finally:
            self.gate.end_recording(j.model_id for j in jobs)
        if wait:
            await self._hash_then_announce(jobs)
        else:
            task = asyncio.create_task(self._hash_then_announce(jobs))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _hash_then_announce(self, jobs: builtins.list[HashJob]) -> None:
        await self._run_jobs(jobs)
        self._emit(ModelEvent("scan_finished"))

    def stop(self) -> None:
        """Abandon hashing in progress (shutdown); the models stay `unverified`."""
        self._stop.set()

    async def close(self) -> None:
        """Stop hashing and wait for background scans to let go of the database."""
        self.stop()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def _listed(self, row: Any) -> bool:
        """Whether a row's store or folder is looked in this run: a store switched off hides
        its models, and so does a folder not looked in (a `--models-dir` of an earlier run, a
        folder removed from Settings), whose files this run's scans cannot see: listed, they
        read "missing" for good though on disk. They are listed again with their folder. A
        row recorded before folders were kept with rows names none: always listed."""
        meta = json.loads(row["meta"]) if row["meta"] else {}
        source = source_of(row["id"], meta)
        if source == FOLDER:
            folder = meta.get("folder")
            return not isinstance(folder, str) or Path(folder) in self.folders
        return source == DEMO or source in self.sources

    # -- helpers -------------------------------------------------------------------------
    async def _set_state(self, model_id: str, state: str) -> None:
        changed = await self._write(
            lambda conn: (
                conn.execute(
                    "UPDATE models SET state = ? WHERE id = ? AND state != ?",
                    (state, model_id, state),
                ).rowcount
            )
        )
        if changed > 0:
            self._emit(ModelEvent("state", model_id, state))

    async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Every write to the `models` table: the rows read before it are forgotten once it
        has committed (or failed)."""
        try:
            return await self.db.run(work)
        finally:
            self._rows.clear()
            self._infos.clear()
            self._rows_generation += 1

    def _emit(self, event: ModelEvent) -> None:
        notify(self.listeners, event)  # one broken listener must not stop a scan
