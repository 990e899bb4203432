"""Finding GGUF model files in the model folders (blocking: run in a worker thread)."""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Parts 2..n of a split model are loaded through part 1; listing them would offer models
# that cannot run on their own.
_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class FoundFile:
    path: Path  # absolute, symlinks resolved
    size_bytes: int
    mtime_ns: int


def is_model_filename(name: str) -> bool:
    lower = name.lower()
    if not lower.endswith(".gguf") or lower.startswith("."):
        return False
    if lower.startswith("mmproj"):  # vision projectors, not models
        return False
    split = _SPLIT_PART.search(name)
    return split is None or int(split.group(1)) == 1


def stat_file(path: Path) -> os.stat_result | None:
    """The file's stat, or None if it is gone or not a regular file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def find_model_files(folders: list[Path], extra: list[Path]) -> list[FoundFile]:
    """`*.gguf` in each folder and its direct subfolders (the publisher/model layouts other
    apps use), plus `extra` files; sorted by path so ids are assigned deterministically."""
    candidates: list[Path] = list(extra)
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            log.warning("cannot read model folder %s: %s", folder, exc)
            continue
        for entry in entries:
            if entry.is_dir():
                try:
                    candidates.extend(Path(e.path) for e in os.scandir(entry.path))
                except OSError as exc:
                    log.warning("cannot read model folder %s: %s", entry.path, exc)
            else:
                candidates.append(Path(entry.path))
    found: dict[Path, FoundFile] = {}
    for candidate in candidates:
        if not is_model_filename(candidate.name):
            continue
        st = stat_file(candidate)
        if st is None:
            continue
        resolved = candidate.resolve()
        found.setdefault(resolved, FoundFile(resolved, st.st_size, st.st_mtime_ns))
    return [found[p] for p in sorted(found)]
