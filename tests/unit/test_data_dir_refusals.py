"""A data directory on a full or read-only disk, as a start meets it, said in one sentence
naming the path and what to do, with nothing half-made left behind (a reviewer's serve ended
in tracebacks from logs.py, lock.py and db.py, and a full disk was called a damaged
database). The faults are injected where the kernel would return them: these run as any
user; tests/integration/test_full_and_read_only_disk.py does it on real tmpfs mounts."""

from __future__ import annotations

import errno
import io
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop import cli
from lmsp_desktop.core.errors import LmspError, StorageFullError, StorageReadOnlyError
from lmsp_desktop.core.lock import DataDirLock
from lmsp_desktop.core.storage import db
from lmsp_desktop.logs import PrivateRotatingFileHandler, setup_logging


@pytest.fixture(autouse=True)
def root_handlers_as_found() -> Any:
    """setup_logging adds handlers to the root logger: closed and taken off again."""
    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for handler in root.handlers[:]:
        if handler not in before:
            root.removeHandler(handler)
            handler.close()


def test_a_lock_file_the_full_disk_takes_no_pid_of_is_a_full_disk_and_is_not_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel makes the file's name on a full tmpfs, but refuses its few bytes."""
    data = tmp_path / "data"

    def full(fd: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "ftruncate", full)
    with pytest.raises(StorageFullError) as refused:
        DataDirLock(data).acquire()
    assert refused.value.message.startswith(f"The disk holding {data} is full")
    assert not (data / "lmsp.lock").exists()


def test_a_log_folder_on_a_read_only_disk_says_cannot_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    real_mkdir = os.mkdir

    def read_only(path: Any, mode: int = 0o777, **kw: Any) -> None:
        if Path(path).is_relative_to(data):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        real_mkdir(path, mode, **kw)

    monkeypatch.setattr(os, "mkdir", read_only)
    with pytest.raises(LmspError) as refused:
        setup_logging(data, console=False)
    assert refused.value.code == "storage_read_only"
    assert refused.value.message == (
        f"cannot write {data / 'logs'} (read-only file system). Mount it writable, or choose "
        "another with --data-dir (or LMSP_DATA_DIR)."
    )


def test_the_store_on_a_read_only_folder_already_0700_is_not_chmodded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`models list`'s traceback came from chmod 0700 on a folder already 0700 (on a
    read-only disk even that is refused)."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    path = data / "lmsp.db"
    sqlite3.connect(path).close()
    path.chmod(0o600)

    def read_only(*args: Any, **kw: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(args[0]))

    monkeypatch.setattr(os, "chmod", read_only)
    assert db._secure_create(path) is False  # nothing to change, nothing refused


def test_a_new_database_on_a_full_disk_is_refused_as_full_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's own 'database or disk is full' while making a new file: a full disk (it
    was called a damaged file), and the empty lmsp.db it made is not left behind."""
    path = tmp_path / "data" / "lmsp.db"

    async def full(self: db.Database, conn: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(db.Database, "_enable_wal", full)
    database = db.Database(path)
    with pytest.raises(StorageFullError):
        import asyncio

        asyncio.run(database.open())
    assert not path.exists()


@pytest.mark.parametrize(("free", "flags"), [(0, 0), (10 << 30, os.ST_RDONLY), (10 << 30, 0)])
def test_an_io_error_opening_the_database_is_told_apart_from_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: int, flags: int
) -> None:
    """The I/O error SQLite gives when it cannot grow the -shm file: a full disk, a
    read-only one, or else (plenty of space, writable) the file's own problem."""
    real = os.statvfs(tmp_path)

    class Disk:
        f_bavail, f_frsize, f_flag = free // real.f_frsize, real.f_frsize, flags

    monkeypatch.setattr(os, "statvfs", lambda path: Disk())
    error = sqlite3.OperationalError("disk I/O error")
    said = db._open_refusal(error, tmp_path / "lmsp.db")
    if free == 0:
        assert isinstance(said, StorageFullError)
    elif flags:
        assert isinstance(said, StorageReadOnlyError)
    else:
        assert said is None  # the damaged-file message stays for this one


class FullDisk(io.StringIO):
    """A log file's stream on a disk that is full until `freed`."""

    freed = False

    def write(self, text: str) -> int:
        if not self.freed:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(text)


def test_the_log_file_on_a_full_disk_warns_once_then_is_quiet_until_it_can_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = PrivateRotatingFileHandler(tmp_path / "x.log", encoding="utf-8")
    stream = FullDisk()
    handler.stream.close()
    handler.stream = stream
    logger = logging.getLogger("test_data_dir_refusals.quiet")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for n in range(5):
            logger.warning("line %d", n)
        err = capsys.readouterr().err
        assert "Logging error" not in err and "Traceback" not in err, err
        assert err.splitlines() == [
            f"lmsp-desktop: cannot write the log file {tmp_path / 'x.log'} (No space left on "
            "device): its lines are lost until it can be written again (free some space on "
            "that disk)"
        ]
        stream.freed = True
        logger.warning("space again")
        assert capsys.readouterr().err.splitlines() == [
            f"lmsp-desktop: writing the log file {tmp_path / 'x.log'} again"
        ]
        assert "space again" in stream.getvalue()
    finally:
        logger.removeHandler(handler)
        handler.stream = io.StringIO()
        handler.close()


def test_serve_on_a_new_folder_of_a_full_disk_says_so_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole start, in-process: the folder, logs/ and the log file are made, then the
    lock's pid cannot be written. One sentence, exit 1, and the new folder is gone."""
    data = tmp_path / "new" / "data"

    def full(fd: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "ftruncate", full)
    assert cli.main(["--data-dir", str(data), "serve", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"lmsp-desktop: The disk holding {data} is full, so nothing was saved. Free some space "
        "and try again; everything saved before is intact."
    ), err
    assert "Traceback" not in err
    assert not (tmp_path / "new").exists(), list(tmp_path.rglob("*"))
