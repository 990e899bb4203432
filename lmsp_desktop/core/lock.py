"""One service per data directory: an exclusive lock file held while the core runs. Also
how a start says that the data directory cannot take what it writes there (a read-only or
full disk, no permission): `storage_refusal`."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from lmsp_desktop.core.errors import LmspError, StorageFullError

# errno values of a write the data directory refuses for a reason its user can fix.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def storage_refusal(exc: OSError, data_dir: Path | str) -> LmspError | None:
    """An OSError met writing in the data directory as the sentence a person acts on (one
    for a full disk, one for a read-only disk or a missing permission, each naming the
    path); None for anything else (a bug, a missing file: left to be raised as it is)."""
    if exc.errno in DISK_FULL:
        return StorageFullError(str(data_dir))
    if exc.errno not in NOT_WRITABLE:
        return None
    where = exc.filename or data_dir
    if exc.errno == errno.EROFS:
        why, fix = "read-only file system", "Mount it writable"
    else:
        why, fix = "permission denied", "Give this user write access to the data directory"
    return LmspError(
        f"cannot write {where} ({why}). {fix}, or choose another with --data-dir (or "
        "LMSP_DATA_DIR).",
        code="storage_read_only",
        status=507,
        type="server_error",
    )


class DataDirLock:
    """An flock on `<data-dir>/lmsp.lock`; the kernel releases it when the process dies."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "lmsp.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise an LmspError: the directory in use, or one it cannot
        write in (full, read-only, no permission). A lock file this call made for a lock it
        then could not take is removed again: a refused start leaves no empty lmsp.lock."""
        made = not self.path.exists()
        fd: int | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            assert fd is not None  # only flock raises it
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LmspError(
                f"Another LMSP Desktop (pid {holder}) is already using {self.path.parent}. "
                "Stop it first, or use --data-dir to start this one elsewhere.",
                code="data_dir_in_use",
                status=503,
            ) from None
        except OSError as exc:
            self._give_back(fd, made)
            raise storage_refusal(exc, self.path.parent) or exc from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError as exc:  # a full disk takes the file's name but not its few bytes
            self._give_back(fd, made)
            raise storage_refusal(exc, self.path.parent) or exc from None
        self._fd = fd

    def _give_back(self, fd: int | None, made: bool) -> None:
        if made:  # unlinked while still held: no other start can have locked this file
            self.path.unlink(missing_ok=True)
        if fd is not None:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
