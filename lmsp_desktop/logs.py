"""Logging: stderr plus a rotating log file in the data directory."""

from __future__ import annotations

import errno
import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any

from lmsp_desktop.core.lock import storage_refusal

# `extra=` of a record for the log file only: the terminal was told in its own words.
LOG_FILE_ONLY = {"log_file_only": True}
# Our loggers: `--log-level DEBUG` is theirs. Libraries stay at INFO whatever the level (at
# DEBUG aiosqlite alone wrote ~20 lines a second of the store's polling SELECTs, filling the
# log in minutes and rotating the startup lines out), unless named here: comma-separated
# logger names (`aiosqlite,huggingface_hub`) that take the level given too.
OURS = "lmsp_desktop"
LIBRARIES_ENV = "LMSP_DEBUG_LIBRARIES"
# A log file write failing for one of these is the disk's state, not a bug (no traceback).
UNWRITABLE = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO)
# Libraries that say every HTTP request at INFO (huggingface_hub's client: each hub call's
# full URL, three lines a pull): at WARNING, unless LMSP_DEBUG_LIBRARIES names them.
CHATTY = ("httpx", "httpx2", "httpcore")


def _not_log_file_only(record: logging.LogRecord) -> bool:
    return not getattr(record, "log_file_only", False)


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file readable by its owner only (0600), like the store beside it: the
    log names models, clients and errors. The umask's 0644 left it, and each file a
    rotation starts, readable by others, inside the 0700 data directory."""

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)  # one an earlier version left 0644
        return os.fdopen(fd, self.mode, encoding=self.encoding, errors=self.errors)

    # The log file on a disk that fills up (or goes read-only): logging's own handleError
    # printed a "--- Logging error ---" traceback to stderr for every line while it lasted.
    # One line says it instead, then the file is quiet until a line reaches it again.
    _cannot_write = False
    _failed = False

    def emit(self, record: logging.LogRecord) -> None:
        self._failed = False
        super().emit(record)  # its failures come to handleError
        if self._cannot_write and not self._failed:
            self._cannot_write = False
            sys.stderr.write(f"lmsp-desktop: writing the log file {self.baseFilename} again\n")

    def handleError(self, record: logging.LogRecord) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError) or exc.errno not in UNWRITABLE:
            super().handleError(record)
            return
        self._failed = True
        if not self._cannot_write:
            self._cannot_write = True
            sys.stderr.write(
                f"lmsp-desktop: cannot write the log file {self.baseFilename} "
                f"({os.strerror(exc.errno)}): its lines are lost until it can be written "
                "again (free some space on that disk)\n"
            )


def setup_logging(
    data_dir: Path | None, level: str = "INFO", *, console: bool = True
) -> Path | None:
    """Log to stderr and to the data directory's log file; `console=False`: to the file only
    (a command that does the service's work, and says its outcome in its own words)."""
    wanted = logging.getLevelNamesMapping()[level.upper()]
    root = logging.getLogger()
    root.setLevel(max(wanted, logging.INFO))
    logging.getLogger(OURS).setLevel(wanted)
    named = {name.strip() for name in os.environ.get(LIBRARIES_ENV, "").split(",")} - {""}
    for name in CHATTY:
        if name not in named:
            logging.getLogger(name).setLevel(max(wanted, logging.WARNING))
    for name in named:
        logging.getLogger(name).setLevel(wanted)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if console:
        stderr = logging.StreamHandler()
        stderr.setFormatter(fmt)
        stderr.addFilter(_not_log_file_only)
        root.addHandler(stderr)
    if data_dir is None:
        return None
    # The data directory itself 0700 when this makes it (mkdir gives only the last part
    # the mode): it holds every prompt, and a window that fails to open must not leave it
    # readable by others.
    log_dir = data_dir / "logs"
    path = log_dir / "lmsp-desktop.log"
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        log_dir.mkdir(exist_ok=True, mode=0o700)
        file_handler = PrivateRotatingFileHandler(
            path, maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
        )
    except OSError as exc:  # a read-only or full disk, no permission: say so, no traceback
        raise storage_refusal(exc, data_dir) or exc from None
    file_handler.setFormatter(fmt)
    root.addHandler(file_handler)
    return path


class StartLeftovers:
    """What a start makes in a data directory before it knows it can use it: the folder
    (and any missing parents), `logs/` and its file, `lmsp.lock`. A start refused there (a
    full or read-only disk, no permission) removes them again (`remove`), so the refusal
    leaves nothing half-made; a data directory that existed, or that holds a database by
    then, is left alone."""

    MADE_NAMES = ("logs/lmsp-desktop.log", "logs", "lmsp.lock")

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.absolute()
        missing = [p for p in (self.data_dir, *self.data_dir.parents) if not p.exists()]
        self.first_made = missing[-1] if missing else None  # the topmost folder to be made

    def remove(self, *, only_empty: bool = False) -> None:
        """`only_empty`: the folders only, if nothing is in them (a refused start of any
        kind, which may have written a log file worth keeping)."""
        if self.first_made is None or (self.data_dir / "lmsp.db").exists():
            return
        root = logging.getLogger()
        for handler in list(root.handlers):  # the log file is closed before it goes
            name = getattr(handler, "baseFilename", None)
            if name is not None and Path(name).is_relative_to(self.data_dir):
                root.removeHandler(handler)
                try:
                    handler.close()
                except OSError:  # its last lines cannot be flushed to a full disk
                    pass
        for name in () if only_empty else self.MADE_NAMES:
            path = self.data_dir / name
            try:
                path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)
            except OSError:
                return  # something else is in it: not only this start's
        folder = self.data_dir
        while True:
            try:
                folder.rmdir()
            except OSError:
                return
            if folder == self.first_made:
                return
            folder = folder.parent
