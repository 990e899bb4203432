"""Logging: stderr plus a rotating log file in the data directory."""

from __future__ import annotations

import logging
import logging.handlers
import os
from pathlib import Path
from typing import Any

# `extra=` of a record for the log file only: the terminal was told in its own words.
LOG_FILE_ONLY = {"log_file_only": True}
# Our loggers: `--log-level DEBUG` is theirs. Libraries stay at INFO whatever the level (at
# DEBUG aiosqlite alone wrote ~20 lines a second of the store's polling SELECTs, filling the
# log in minutes and rotating the startup lines out), unless named here: comma-separated
# logger names (`aiosqlite,huggingface_hub`) that take the level given too.
OURS = "lmsp_desktop"
LIBRARIES_ENV = "LMSP_DEBUG_LIBRARIES"
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
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_dir = data_dir / "logs"
    log_dir.mkdir(exist_ok=True, mode=0o700)
    path = log_dir / "lmsp-desktop.log"
    file_handler = PrivateRotatingFileHandler(
        path, maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
    )
    file_handler.setFormatter(fmt)
    root.addHandler(file_handler)
    return path
