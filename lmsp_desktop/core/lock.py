"""One service per data directory: an exclusive lock file held while the core runs."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from lmsp_desktop.core.errors import LmspError


class DataDirLock:
    """An flock on `<data-dir>/lmsp.lock`; the kernel releases it when the process dies."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / "lmsp.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LmspError(
                f"Another LMSP Desktop (pid {holder}) is already using {self.path.parent}. "
                "Stop it first, or use --data-dir to start this one elsewhere.",
                code="data_dir_in_use",
                status=503,
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
