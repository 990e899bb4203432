"""Test files that cost seconds to build (a cut model, a split one, one with other metadata),
built once per machine and shared by every test process (pytest-xdist workers, later runs).

`built_once(key, name, build)` keeps what `build` writes in the temp dir, in a folder named
after `key` and the recipe: the caller's key says what the file is made from (the demo
file's content, file_key, and a block count), and a digest of the source of the modules that
build it is added, so a changed recipe gets a new folder instead of an old file. The build
runs under a file lock (parallel workers wait for one build, not build twice) and writes a
partial name renamed into place when whole: a killed build leaves no half file under the
name, and the next test builds it again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from filelock import FileLock

ROOT = Path(tempfile.gettempdir()) / "lmsp-tests-models"


def built_once(key: str, name: str, build: Callable[[Path], object], *recipe: ModuleType) -> Path:
    """The path of `name` (a file or a folder) that `build(path)` writes, built on first use.
    The recipe is the module defining `build` and the modules in `recipe` (the code it
    calls): their source is part of the folder's name."""
    function = build.func if isinstance(build, functools.partial) else build
    modules = [sys.modules[function.__module__], *recipe]
    digest = hashlib.sha256()
    for module in modules:
        digest.update(Path(inspect.getfile(module)).read_bytes())
    path = ROOT / f"{key}-{digest.hexdigest()[:12]}" / name
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            partial = path.with_name(f"{name}.{os.getpid()}.partial")
            try:
                build(partial)
                os.replace(partial, path)
            except BaseException:
                _remove(partial)  # a failed build (a kill -9 leaves it, never under `name`)
                raise
    return path


def file_key(path: Path) -> str:
    """A key for what `path` holds: a digest of its bytes (~0.07 CPU-s for the demo's 98 MB,
    once per process). Not its modification time: every checkout's `make install` writes
    the same demo file anew, and the builds from it are the same."""
    stat = path.stat()
    return _digest(path, stat.st_size, stat.st_mtime_ns)


@functools.cache
def _digest(path: Path, size: int, mtime_ns: int) -> str:
    with path.open("rb") as file:
        return f"{size}-{hashlib.file_digest(file, 'sha256').hexdigest()[:16]}"


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
