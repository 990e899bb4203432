"""Whole-file digests kept per machine, beside the exactness verdicts (verdicts.py): the same
unchanged model file seen from another data folder (the window and `serve --data-dir X`, a
second data folder, every test service) is not read whole again to be verified.

A digest is trusted by the rule the registry already uses to skip rehashing a file at a
restart: the same size and modification time (ns). The file is its device and inode (the
resolved path where the file system reports inode 0), as in verdict_key: the same file under
another name (a hard link, a symlink) is the same content. Only a digest whose file did not
change while it was read is kept (the registry records one only then).

One small JSON file in the user's cache directory, rewritten whole through a temporary file
and a rename (a reader sees the old file or the new one); the read-merge-write runs under a
lock beside it so two processes recording at once keep both digests. A missing, unreadable
or foreign file is an empty cache: the file is hashed, as without it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path

from lmsp_desktop.core.models.digests import is_digest

log = logging.getLogger(__name__)
VERSION = 1
# Digests kept (the most recent): one per model file this machine has verified.
KEPT = 500
# A record waits this long for another process's; past it the digest is not kept (hashed again
# next time), never a verification held up.
LOCK_WAIT_S = 5.0
FILE_NAME = "model-digests.json"


def file_identity(path: Path, stat: os.stat_result) -> str:
    """The file itself: device and inode, or its resolved path where the inode is 0 (FAT,
    some FUSE and network mounts), as verdict_key knows it."""
    return f"{stat.st_dev}:{stat.st_ino or path.resolve()}"


class DigestCache:
    """`sha256:` digests by file identity, size and mtime, in the JSON file at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, path: Path, stat: os.stat_result) -> str | None:
        """The digest kept for this file as `stat` shows it, or None (never kept, or its
        size or modification time moved since: hash it)."""
        entry = self._read().get(file_identity(path, stat))
        if entry is None or entry[:2] != [stat.st_size, stat.st_mtime_ns]:
            return None
        return str(entry[2])

    def put(self, path: Path, stat: os.stat_result, digest: str) -> None:
        """Keep `digest` for the file as `stat` showed it both before and after the hash."""
        from filelock import FileLock, Timeout

        entry = [stat.st_size, stat.st_mtime_ns, digest]
        temporary: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(self.path.parent / f".{FILE_NAME}.lock", timeout=LOCK_WAIT_S):
                kept = self._read()
                key = file_identity(path, stat)
                if kept.get(key) == entry:
                    return
                kept.pop(key, None)  # re-inserted last: the most recent are the ones kept
                kept[key] = entry
                kept = dict(list(kept.items())[-KEPT:])
                fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".digests-")
                with os.fdopen(fd, "w") as out:
                    json.dump({"version": VERSION, "digests": kept}, out)
                os.replace(temporary, self.path)
                temporary = None
        except (OSError, Timeout) as exc:  # a read-only or full cache directory: hash next time
            log.warning("could not keep the digest of %s in %s: %s", path, self.path, exc)
        finally:
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)

    def _read(self) -> dict[str, list[object]]:
        try:
            data = json.loads(self.path.read_text())
            digests = data["digests"] if data.get("version") == VERSION else {}
            return {
                str(k): [int(v[0]), int(v[1]), v[2]]
                for k, v in digests.items()
                if len(v) == 3 and is_digest(v[2])
            }
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, AttributeError, KeyError, TypeError) as exc:
            log.warning("ignoring the model digests in %s: %s", self.path, exc)
            return {}
