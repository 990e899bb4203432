"""One SQLite database: a single writer connection, and a reader connection.

Every write goes through `run(work)`: a plain function of the writer's sqlite3 connection,
run in the writer's thread inside a transaction (shared with the other units queued at that
moment, each in its own savepoint). A transaction, BEGIN IMMEDIATE to COMMIT, is one call in
the writer thread, never spread over awaits, so no two writes ever interleave and no
coroutine runs inside another's transaction (what DESIGN.md's lock from BEGIN to COMMIT is
for). Reads go through `fetchall`/`fetchone` on the reader connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import functools
import logging
import os
import shutil
import sqlite3
import struct
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from lmsp_desktop.core.errors import (
    DatabaseLockedError,
    LmspError,
    StorageFullError,
    StorageReadOnlyError,
)
from lmsp_desktop.core.listeners import notify
from lmsp_desktop.core.lock import storage_refusal
from lmsp_desktop.core.storage.schema import CURRENT_VERSION, MIGRATIONS, WRITER_TEMP_SCHEMA

log = logging.getLogger(__name__)

# FULL: in WAL mode every commit is fsynced, so a task acknowledged with 202 survives both a
# killed process and a power loss. NORMAL would survive only the former.
DEFAULT_SYNCHRONOUS = "FULL"
BUSY_TIMEOUT_MS = 5000
MAX_GROUP = 256  # units of work one group commit takes at most
# The writer checkpoints (copies the WAL back into the database file) in its own step
# between group commits once this many frames wait, instead of SQLite's automatic
# checkpoint inside a COMMIT at 1000: a checkpoint costs its pages plus an fsync of the
# database file, and inside a commit every unit of that group (and every writer queued
# behind it) waited for it. At SQLite's own threshold, 1000 frames (4 MiB): measured at
# load 8, a step took 14 ms at the median for 512 frames as for 256 (the fsync dominates),
# so steps half as often cost half as much; at 512, streaming 32 tasks (B2) made twice the
# checkpoints of the raw loop it is measured against.
CHECKPOINT_FRAMES = 1000
# The wal-index header at the start of the -shm file (sqlite.org/walformat.html), in the
# machine's byte order: mxFrame (the last valid frame) and nBackfill (frames copied back).
_SHM_U32 = struct.Struct("=I")
_SHM_MX_FRAME_AT, _SHM_BACKFILL_AT = 16, 96
T = TypeVar("T")
# Free space below which an I/O error of SQLite's while opening is the disk being full: the
# -shm file grows 32 KiB at a time, the WAL a page plus its header.
NEARLY_FULL_BYTES = 1024 * 1024


@dataclass(frozen=True)
class _Unit:
    """A unit of work waiting for the writer, and the future its caller awaits."""

    work: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    large: bool  # first in its transaction, without a savepoint (Database.run)


class DatabaseError(LmspError):
    """The database file cannot be used as it is (corrupt, from a newer version, unreadable)."""

    status = 503
    type = "server_error"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="database_unusable")


def translate(exc: sqlite3.Error, path: Path) -> Exception:
    """Turn an SQLite failure a person can act on into an LmspError; leave bugs alone."""
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc).lower()
    if code == sqlite3.SQLITE_FULL or "disk is full" in text or "database or disk is full" in text:
        return StorageFullError(str(path.parent))
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "database is locked" in text:
        return DatabaseLockedError(str(path))
    if code == sqlite3.SQLITE_READONLY or "readonly database" in text:
        return StorageReadOnlyError(str(path))
    if isinstance(exc, sqlite3.OperationalError) and "file is too large" in text:
        return StorageFullError(str(path.parent))
    return exc


def _copy_whole(source: Path, target: Path) -> None:
    """Copy `source` to `target` whole or not at all: a disk that fills up mid-copy left a
    truncated backup that looked like a good one. Written beside it, then renamed."""
    partial = target.with_name(f"{target.name}.partial")
    try:
        shutil.copy2(source, partial)
        # On disk before its name says it is whole (a power cut could leave the name on
        # an empty file), and the name on disk before the migration changes the database.
        with open(partial, "rb+") as copied:
            os.fsync(copied.fileno())
        os.replace(partial, target)
        _fsync_directory(target.parent)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageFullError(str(target.parent)) from exc
        raise


def _fsync_directory(folder: Path) -> None:
    if os.name == "nt":  # Windows cannot open a folder to fsync it; NTFS journals renames
        return
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _secure_create(path: Path) -> bool:
    """Create the data directory 0700 and the database file 0600 before SQLite opens them;
    True when this made the file.

    Existing files with looser modes are tightened too: the database holds token hashes and
    every prompt. SQLite gives the -wal and -shm files the database file's mode. A folder
    this cannot write in (a read-only or full disk, no permission) is said as such
    (lock.storage_refusal), not as an OSError's traceback; a folder already 0700 is not
    chmodded (on a read-only disk even that fails).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent.stat().st_mode & 0o077:
            os.chmod(path.parent, 0o700)
        made = not path.exists()
        if made:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
    except OSError as exc:
        raise storage_refusal(exc, path.parent) or exc from None
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            if file.exists() and file.stat().st_mode & 0o077:
                os.chmod(file, 0o600)
        except OSError:  # not ours to change (e.g. another user's file): SQLite will say
            log.debug("could not tighten the mode of %s", file, exc_info=True)
    return made


def _open_refusal(exc: sqlite3.Error, path: Path) -> Exception | None:
    """Why the database could not be opened, when the cause is its disk and not its file: a
    full disk, or one this user cannot write (SQLite's own code, or, for the I/O error it
    gives when it cannot grow the -shm file or make the -wal one, the folder's state). A
    full disk called the file damaged, and the advice to move it aside lost a user's tasks."""
    said = translate(exc, path)
    if isinstance(said, (StorageFullError, StorageReadOnlyError)):
        return said
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    text = str(exc).lower()
    if code not in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN) and not any(
        words in text for words in ("disk i/o error", "unable to open")
    ):
        return None
    try:
        disk = os.statvfs(path.parent)
    except OSError:
        return None
    if disk.f_flag & os.ST_RDONLY or not os.access(path.parent, os.W_OK):
        return StorageReadOnlyError(str(path))
    if disk.f_bavail * disk.f_frsize < NEARLY_FULL_BYTES:
        return StorageFullError(str(path.parent))
    return None


class Database:
    """The service's SQLite file: one writer connection, one reader connection."""

    def __init__(self, path: Path | str, *, synchronous: str = DEFAULT_SYNCHRONOUS) -> None:
        self.path = Path(path)
        self.synchronous = synchronous
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        # The units waiting for the writer: the loop adds them, the writer thread takes them.
        self._queue = threading.Lock()
        self._pending: list[_Unit] = []
        # True from the moment a unit finds no writer pass going on until a pass has found
        # nothing more to take (Database._write_all): only one pass is ever queued or running.
        self._writing = False
        self._passes: asyncio.Task[None] | None = None
        # A descriptor on the -shm file, open from open() until after the connections are
        # closed: closing any descriptor of a file drops every POSIX lock this process holds
        # on it, SQLite's included (sqlite.org/howtocorrupt.html 2.2), so it is never
        # opened and closed while SQLite uses the file.
        self._shm: int | None = None
        # Callbacks run on the loop after every successful commit (the change bus hooks in).
        self.after_commit: list[Any] = []
        # The integrity check running beside the first writes (open(check_beside=True)):
        # its outcome (None: ok, else what is wrong), awaited before any COMMIT; None once
        # it has passed, or when it ran before open() returned.
        self._integrity: concurrent.futures.Future[str | None] | None = None
        self._checker: sqlite3.Connection | None = None
        self._check_thread: threading.Thread | None = None

    # -- opening -------------------------------------------------------------------------
    async def open(
        self,
        *,
        check_beside: bool = False,
        before_writes: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Open the file, refusing a damaged or newer one before anything in it changes.

        `check_beside`: when the file is already a WAL database of this version (opening it
        changes nothing), the integrity check runs in a thread of its own beside the first
        writes instead of before open() returns, and no transaction commits before it has
        passed (a damage found fails that commit, and every later one, with DatabaseError;
        the file stays as it was). Startup's recovery is prepared meanwhile (B4).

        `before_writes` runs once the file is known to be one this version can use, before
        it changes in any way (the switch to WAL, a migration): it may read through the
        writer connection, and what it raises leaves the file as it was."""
        made = _secure_create(self.path)
        old_umask = os.umask(0o077)  # the -wal and -shm files SQLite creates stay private
        try:
            # Look before changing anything: switching to WAL rewrites the file header, so a
            # damaged or newer database is refused while it is still exactly as it was.
            self._writer = await self._connect(wal=False)
            if check_beside and await self._is_current_wal():
                self._integrity = self._start_check()
            else:
                await self._check_integrity_quickly()
            await self._refuse_newer()
            if before_writes is not None:
                await before_writes()
            await self._enable_wal(self._writer)
            await self._writer.execute("PRAGMA wal_autocheckpoint=0")  # see CHECKPOINT_FRAMES
            await self._migrate()
            await self._run_script(WRITER_TEMP_SCHEMA)
            self._reader = await self._connect(readonly=True)
            self._shm = os.open(f"{self.path}-shm", os.O_RDONLY)
        except sqlite3.DatabaseError as exc:
            await self.close()
            self._forget(made)
            refusal = _open_refusal(exc, self.path)
            if refusal is not None:
                raise refusal from exc
            raise DatabaseError(
                f"The database file {self.path} cannot be read ({exc}). It may be damaged. "
                "Move it aside (keep a copy) and start again to create a new one, or restore "
                "it from a backup. Nothing was changed."
            ) from exc
        except BaseException:
            await self.close()  # never leave a connection (and its thread) behind
            self._forget(made)
            raise
        finally:
            os.umask(old_umask)

    def _forget(self, made: bool) -> None:
        """A file open() made and could not finish (a full disk) holds nothing of anyone's:
        removed, so a refused start leaves no half-made database behind."""
        if made:
            for name in (f"{self.path}-wal", f"{self.path}-shm", str(self.path)):
                Path(name).unlink(missing_ok=True)

    async def _connect(self, readonly: bool = False, *, wal: bool = True) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            await conn.execute("PRAGMA foreign_keys=ON")
            if readonly:
                await conn.execute("PRAGMA query_only=ON")
            elif wal:
                await self._enable_wal(conn)
                await conn.execute("PRAGMA wal_autocheckpoint=0")  # see CHECKPOINT_FRAMES
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _enable_wal(self, conn: aiosqlite.Connection) -> None:
        mode = await (await conn.execute("PRAGMA journal_mode=WAL")).fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            raise sqlite3.DatabaseError("could not switch the journal to WAL")
        await conn.execute(f"PRAGMA synchronous={self.synchronous}")

    async def _refuse_newer(self) -> None:
        version = await self.user_version()
        if version > CURRENT_VERSION:
            raise DatabaseError(
                f"The database {self.path} was written by a newer LMSP Desktop (schema "
                f"{version}, this version knows {CURRENT_VERSION}). Upgrade LMSP Desktop, or "
                "point --data-dir elsewhere. Nothing was changed."
            )

    async def _is_current_wal(self) -> bool:
        """Already a WAL database of this schema version: opening it writes nothing to it."""
        assert self._writer is not None
        mode = await (await self._writer.execute("PRAGMA journal_mode")).fetchone()
        return bool(mode and str(mode[0]).lower() == "wal") and (
            await self.user_version() == CURRENT_VERSION
        )

    def _start_check(self) -> concurrent.futures.Future[str | None]:
        """`PRAGMA quick_check` on a read-only connection of its own, in a thread (SQLite
        runs it without the GIL, beside recovery's work on the other core)."""
        outcome: concurrent.futures.Future[str | None] = concurrent.futures.Future()

        def check() -> None:
            try:
                # absolute(): as_uri() refuses a relative path (`--data-dir data`), and the
                # first commit then waited for this check for ever (a hung start).
                conn = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True)
                self._checker = conn
                try:
                    row = conn.execute("PRAGMA quick_check").fetchone()
                finally:
                    self._checker = None
                    conn.close()
                found = None if row is not None and row[0] == "ok" else str(row[0] if row else "?")
                outcome.set_result(found)
            except sqlite3.Error as exc:  # not readable at all, or interrupted by close()
                refusal = _open_refusal(exc, self.path)  # a full disk is no damage
                if refusal is not None:
                    outcome.set_exception(refusal)
                else:
                    outcome.set_result(str(exc))
            except BaseException as exc:  # a bug: it fails the first commit, never hangs it
                outcome.set_exception(exc)

        self._check_thread = threading.Thread(target=check, name="lmsp-quick-check", daemon=True)
        self._check_thread.start()
        return outcome

    async def _check_integrity_quickly(self) -> None:
        assert self._writer is not None
        row = await (await self._writer.execute("PRAGMA quick_check")).fetchone()
        if row is None or row[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {row[0] if row else '?'}")

    async def _migrate(self) -> None:
        assert self._writer is not None
        version = await self.user_version()
        await self._refuse_newer()
        if version == CURRENT_VERSION:
            return
        if version > 0:
            backup = self.path.with_name(f"{self.path.name}.v{version}.bak")
            await self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            _copy_whole(self.path, backup)
            log.info(
                "backed up %s to %s before migrating its schema from version %d to %d",
                self.path,
                backup,
                version,
                CURRENT_VERSION,
            )
        for target in range(version, CURRENT_VERSION):
            await self._writer.execute("BEGIN IMMEDIATE")
            try:
                await self._run_script(MIGRATIONS[target])
                await self._writer.execute(f"PRAGMA user_version={target + 1}")
                await self._writer.execute("COMMIT")
            except BaseException:
                await self._writer.execute("ROLLBACK")
                raise

    async def _run_script(self, script: str) -> None:
        # executescript() would COMMIT first; run statement by statement inside the transaction.
        assert self._writer is not None
        for statement in _split_sql(script):
            await self._writer.execute(statement)

    async def user_version(self) -> int:
        assert self._writer is not None
        row = await (await self._writer.execute("PRAGMA user_version")).fetchone()
        return int(row[0]) if row else 0

    async def close(self) -> None:
        checker, thread = self._checker, self._check_thread
        if thread is not None:
            if checker is not None:
                checker.interrupt()  # a check nobody will wait for
            await asyncio.to_thread(thread.join)
            self._check_thread = None
        for conn in (self._reader, self._writer):
            if conn is not None:
                try:
                    await conn.close()
                except Exception:  # closing a broken connection must not hide the real error
                    log.debug("error while closing the database", exc_info=True)
        self._reader = self._writer = None
        if self._shm is not None:
            os.close(self._shm)  # only now: see __init__
            self._shm = None

    # -- writing -------------------------------------------------------------------------
    async def run(self, work: Callable[[sqlite3.Connection], T], *, large: bool = False) -> T:
        """The one way to write (Datasette's `execute_write_fn` shape): `work` gets the
        writer's sqlite3 connection and runs synchronously in the writer's thread.

        Group commit: `work` runs inside a transaction it shares with
        every other unit of work queued at that moment, and return once that transaction has
        committed (one fsync for the whole group).

        Each unit of a group runs in its own SAVEPOINT, so one that raises is rolled back
        alone and its caller gets the exception; the others still commit. This is what lets
        64 concurrent creates share one durable commit instead of queueing for 64 fsyncs.
        The first unit of a transaction needs no savepoint: when it fails, the transaction
        is rolled back and the units after it run in a new one. A unit alone is run so, and
        `large=True` asks for it: such a unit (a purge batch, every page of which a savepoint
        would copy once more: B5) starts a transaction, which the units queued after it
        still share.
        """
        # Not shielded: a caller cancelled while waiting cancels only this future (the
        # writer's settling skips a done one); its work still commits with its group, as it would
        # have under a shield, and nothing is left whose exception nobody retrieves.
        return await self.submit(work, large=large)

    def submit(
        self, work: Callable[[sqlite3.Connection], T], *, large: bool = False
    ) -> asyncio.Future[T]:
        """`run` without awaiting: the future of `work`'s outcome, set once its group has
        committed. For a caller that reacts in a done-callback instead of a task of its own
        (the delta batch: one loop turn fewer per commit on the streaming hot path)."""
        if self._writer is None:
            raise RuntimeError("database is not open")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._queue:
            self._pending.append(_Unit(work, future, large))
            if self._writing:
                return future  # the pass going on takes it
            self._writing = True
        self._passes = asyncio.create_task(self._write_all())
        return future

    def last_waiting(self) -> asyncio.Future[Any] | None:
        """The future of the unit submitted last, while it still waits for the writer: a
        batch that may still take work without letting it overtake a unit submitted after
        the batch (TaskStore.transition)."""
        with self._queue:
            return self._pending[-1].future if self._pending else None

    async def _write_all(self) -> None:
        """On the loop: writer passes (`_write_groups`) until no unit is left waiting. A pass
        ends when it finds none, or after a group that failed, which the loop has settled by
        the time the next pass runs (so a later unit can see it failed: deltas.py)."""
        loop = asyncio.get_running_loop()
        while True:
            writer = self._writer
            if writer is None:
                self._end_passes(RuntimeError("database is not open"))
                return
            # aiosqlite's own hook for running a function in its connection thread.
            going: asyncio.Future[None] = asyncio.ensure_future(
                writer._execute(self._write_groups, writer._conn, loop)  # type: ignore[no-untyped-call]
            )
            try:
                await asyncio.shield(going)
            except asyncio.CancelledError as exc:
                # This task is cancelled (the loop shutting down), the pass goes on in the
                # writer thread: the units it leaves fail once it has ended, not before (a
                # second pass must not start while a failure it met is still unsettled).
                going.add_done_callback(functools.partial(self._pass_stopped, exc))
                raise
            except Exception as exc:  # the pass could not run (the database was closed)
                self._end_passes(exc)
                return
            with self._queue:
                if not self._pending:
                    self._writing = False
                    return

    def _pass_stopped(self, error: BaseException, going: asyncio.Future[None]) -> None:
        self._end_passes(error)

    def _end_passes(self, error: BaseException) -> None:
        """No pass is going on and none will start: the units left waiting fail with
        `error`, as a group that failed."""
        with self._queue:
            left, self._pending, self._writing = self._pending, [], False
        self._settle(left, None, error)

    def _write_groups(self, conn: sqlite3.Connection, loop: asyncio.AbstractEventLoop) -> None:
        """In the writer thread: group after group (`_next_group`) while units wait. Each
        group's outcomes go to the loop as soon as it has committed, and the next group
        starts at once: the loop's turn (settling, publishing, the appenders preparing their
        next tokens, B2) overlaps the writer's next transaction instead of standing between
        two. After a group that failed, the pass stops: the loop settles that failure before
        any later unit runs (a delta batch checks its task's previous one, deltas.py). The
        WAL is checkpointed here too, between groups, once CHECKPOINT_FRAMES wait."""
        while True:
            with self._queue:
                group = self._next_group()
            if not group:
                return
            integrity = self._integrity
            run = _run_group
            if integrity is not None:  # the check beside the first writes (open)
                run = functools.partial(
                    _run_group, before_commit=functools.partial(self._passed, integrity)
                )
            try:
                outcomes = run(conn, [unit.work for unit in group])
            except BaseException as exc:
                loop.call_soon_threadsafe(self._settle, group, None, exc)
                if not isinstance(exc, Exception):
                    raise
                return
            if integrity is not None:
                self._integrity = None  # it passed: this group committed
            loop.call_soon_threadsafe(self._settle, group, outcomes, None)
            if self.wal_backlog() >= CHECKPOINT_FRAMES:
                self._checkpoint(conn)

    def _settle(
        self,
        group: list[_Unit],
        outcomes: list[tuple[bool, Any]] | None,
        error: BaseException | None,
    ) -> None:
        """On the loop: each unit's caller learns its outcome (a unit whose caller was
        cancelled meanwhile is skipped), or the whole group's error; after a commit, the
        after-commit hooks run."""
        if error is not None:
            failure = translate(error, self.path) if isinstance(error, sqlite3.Error) else error
            for unit in group:
                if not unit.future.done():
                    unit.future.set_exception(failure)
            return
        assert outcomes is not None
        for unit, (ok, value) in zip(group, outcomes, strict=True):
            future = unit.future
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(
                    translate(value, self.path) if isinstance(value, sqlite3.Error) else value
                )
        self._after_commit()

    def _next_group(self) -> list[_Unit]:
        """The units of the next transaction: up to MAX_GROUP in their order, with at most
        one `large` unit, which goes first (no savepoint there; the others commit with it
        all the same)."""
        group: list[_Unit] = []
        large: _Unit | None = None
        for at, unit in enumerate(self._pending):
            full = len(group) + (large is not None) == MAX_GROUP
            if full or (unit.large and large is not None):  # a second one: the next group
                self._pending = self._pending[at:]
                break
            if unit.large:
                large = unit
            else:
                group.append(unit)
        else:
            self._pending = []
        return group if large is None else [large, *group]

    def _passed(self, integrity: concurrent.futures.Future[str | None]) -> None:
        """In the writer thread, before a COMMIT: wait for the integrity check; a damage it
        found fails the transaction (rolled back: the file stays as it was)."""
        found = integrity.result()
        if found is not None:
            raise DatabaseError(
                f"The database file {self.path} cannot be read (integrity check failed: "
                f"{found}). It may be damaged. Move it aside (keep a copy) and start again to "
                "create a new one, or restore it from a backup. Nothing was changed."
            )

    def _after_commit(self) -> None:
        notify(self.after_commit)  # committed already: a broken hook must not look like a failure

    # -- reading -------------------------------------------------------------------------
    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        conn = self._reader or self._writer
        if conn is None:
            raise RuntimeError("database is not open")
        try:
            rows = await conn.execute_fetchall(sql, tuple(params))
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        return list(rows)

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    def wal_backlog(self) -> int:
        """WAL frames not yet copied back into the database file, read from the wal-index
        header (the first bytes of the -shm file SQLite keeps mapped; 0 when unknown)."""
        if self._shm is None:
            return 0
        try:
            header = os.pread(self._shm, _SHM_BACKFILL_AT + 4, 0)
        except OSError:
            return 0
        if len(header) < _SHM_BACKFILL_AT + 4:
            return 0
        last: int = _SHM_U32.unpack_from(header, _SHM_MX_FRAME_AT)[0]
        copied: int = _SHM_U32.unpack_from(header, _SHM_BACKFILL_AT)[0]
        return max(0, last - copied)

    async def checkpoint(self) -> None:
        """A PASSIVE checkpoint now, in the writer thread once the pass going on has ended
        (the writer also checkpoints between groups, once CHECKPOINT_FRAMES wait:
        `_write_groups`)."""
        writer = self._writer
        if writer is None:
            return
        await writer._execute(self._checkpoint, writer._conn)  # type: ignore[no-untyped-call]

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """In the writer thread: a PASSIVE checkpoint as a write step of its own. Only the
        writer checkpoints (see DESIGN.md on SQLite's WAL-reset bug). A checkpoint that fails
        loses nothing (the frames stay in the WAL): it is logged, the next one retries."""
        if self._integrity is not None:
            return  # nothing reaches the file before the integrity check has passed
        try:
            # Fetched to the end: a statement left in progress would block SAVEPOINT.
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            log.warning("WAL checkpoint failed; the next one retries", exc_info=True)


def _run_group(
    conn: sqlite3.Connection,
    works: list[Callable[[sqlite3.Connection], Any]],
    *,
    before_commit: Callable[[], None] | None = None,
) -> list[tuple[bool, Any]]:
    """In the writer thread: one transaction, the first unit of work in it directly, each
    other one in its own savepoint (Database.run); `before_commit` may still fail the whole
    group (it is rolled back)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        first = _run_first(conn, works[0])
        if not first[0] and len(works) > 1:
            conn.execute("BEGIN IMMEDIATE")  # the first one failed and was rolled back
        outcomes = [first, *(_run_in_savepoint(conn, work) for work in works[1:])]
        if before_commit is not None:
            before_commit()
        if conn.in_transaction:  # not when the only unit failed and was rolled back
            conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcomes


def _run_in_savepoint(
    conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], Any]
) -> tuple[bool, Any]:
    """A unit among others: a failure rolls back its own savepoint only."""
    conn.execute("SAVEPOINT unit")
    try:
        result = work(conn)
    except Exception as exc:
        if not conn.in_transaction:
            raise  # SQLite rolled everything back (disk full, I/O): the group fails
        conn.execute("ROLLBACK TO unit")
        conn.execute("RELEASE unit")
        return False, exc
    conn.execute("RELEASE unit")
    return True, result


def _run_first(
    conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], Any]
) -> tuple[bool, Any]:
    """The first unit of a transaction: no savepoint; a failure rolls the transaction back
    (nothing else is in it yet)."""
    try:
        return True, work(conn)
    except Exception as exc:
        if not conn.in_transaction:
            raise  # SQLite rolled back already (disk full, I/O): the group fails, as above
        conn.execute("ROLLBACK")
        return False, exc


def _split_sql(script: str) -> list[str]:
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


def settle_waiters(
    waiters: Iterable[tuple[Any, asyncio.Future[Any]]],
    committed: asyncio.Future[Any],
    path: Path,
) -> None:
    """On the loop, once a batch's commit has returned: each waiter gets its own outcome,
    `committed.result()[key]` as (ok, result or its own error), or the whole commit's error
    (nothing of it was written). A waiter whose caller was cancelled meanwhile is skipped.
    Its own SQLite error is said as the whole commit's is (translate: a statement refused
    with SQLITE_FULL inside a transaction that stays open is the disk's being full too,
    for the runner and the API alike, not a raw OperationalError)."""
    if committed.cancelled():
        for _, waiter in waiters:
            waiter.cancel()
        return
    error = committed.exception()
    outcomes = None if error is not None else committed.result()
    for key, waiter in waiters:
        if waiter.done():
            continue
        if outcomes is None:
            waiter.set_exception(error)  # type: ignore[arg-type]
            continue
        ok, value = outcomes[key]
        if ok:
            waiter.set_result(value)
        else:
            waiter.set_exception(
                translate(value, path) if isinstance(value, sqlite3.Error) else value
            )


def now() -> float:
    return time.time()
