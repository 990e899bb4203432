"""Exactness verdicts kept across processes: the load-time probe (llama_probe.py, 160 tokens
read before a model's first token, seconds on a busy machine) answers the same for the
same file, settings, llama.cpp build and machine, so a restarted service, and every fresh
worker after a crash or an idle unload, is given the verdict instead of probing again.

The verdicts live in one small JSON file in the user's cache directory (config.py's
default_cache_dir), rewritten whole through a temporary file and a rename: a reader sees
the old file or the new one, never half of one. A missing, unreadable or foreign file is
an empty cache (the probe runs); the cache is never needed for correctness.

Two processes loading one file with one set of settings at once (two services sharing the
cache, the window and `serve`) probe it once: probe_once runs the probe under a lock
beside the cache, and the second waits for the first's verdict instead of probing too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import logging
import os
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines.base import LoadSettings

log = logging.getLogger(__name__)
# Raise when what the probe checks changes: verdicts of the older probe are not used.
PROBE_VERSION = 1
# Verdicts kept in the file (the most recent); one per file and settings ever loaded.
KEPT = 200
# How long a load waits for another process probing the same file and settings before it
# probes itself (the probe takes well under a second on a quiet machine, seconds on a busy one).
PROBE_WAIT_S = 10.0


def verdict_key(path: Path, settings: LoadSettings | None, options: dict[str, Any]) -> str | None:
    """What a verdict holds for: the file as it is now (the file itself, its size and
    modification time: a replaced file is probed again), every load setting (KV type and
    with it flash attention, context, sequences, GPU layers), the engine's options (threads,
    n_batch), the llama.cpp build and this machine's processor. None when the file cannot
    be read. The file is its device and inode, not its name: the same file under other
    names (a hard link in another app's model store, a symlink, a renamed file) has the
    same numerics and is not probed again."""
    try:
        stat = path.stat()
    except OSError:
        return None
    facts = [
        PROBE_VERSION,
        stat.st_dev,
        # Some file systems (FAT, some FUSE and network mounts) report no inode (0): there
        # the file is known by its resolved path, as before, not shared with another file.
        stat.st_ino or str(path.resolve()),
        stat.st_size,
        stat.st_mtime_ns,
        dataclasses.asdict(settings or LoadSettings()),
        sorted((k, repr(v)) for k, v in options.items()),
        _llama_build(),
        _processor(),
        os.cpu_count(),
    ]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


class VerdictCache:
    """Verdicts by verdict_key, in memory and (when `path` is given) in that file."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._known: dict[str, bool] = {}

    def get(self, key: str) -> bool | None:
        if key not in self._known:
            self._known.update(self._read())
        return self._known.get(key)

    def put(self, key: str, exact: bool) -> None:
        if self._known.get(key) == exact:
            return  # told again with every finished generation: nothing new
        self._known[key] = exact
        if self.path is None:
            return
        kept = self._read()
        if kept.get(key) == exact:
            return  # written by the worker that probed (probe_once)
        kept[key] = exact
        kept = dict(list(kept.items())[-KEPT:])
        temporary: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".verdicts-")
            with os.fdopen(fd, "w") as out:
                json.dump({"version": PROBE_VERSION, "verdicts": kept}, out)
            os.replace(temporary, self.path)
        except OSError as exc:  # a read-only or full cache directory: probe next time
            log.warning("could not keep the exactness verdict in %s: %s", self.path, exc)
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)

    def _read(self) -> dict[str, bool]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
            verdicts = data["verdicts"] if data.get("version") == PROBE_VERSION else {}
            return {str(k): bool(v) for k, v in verdicts.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, AttributeError, KeyError, TypeError) as exc:
            log.warning("ignoring the exactness verdicts in %s: %s", self.path, exc)
            return {}


def probe_once(file: Path, key: str, probe: Callable[[], bool], wait: float = PROBE_WAIT_S) -> bool:
    """The verdict for `key` kept in `file`, or `probe`'s, kept there: run in the process
    that loads the model, under a lock beside `file` that another process probing the same
    key holds until its verdict is kept, so it is read instead of probed again. The lock is
    the OS's (flock): a prober that dies releases it. One that is still probing after `wait`
    seconds, or a cache directory that cannot be written, is not waited for: probe here."""
    from filelock import FileLock, Timeout

    # One lock per key (an empty file per model and settings ever probed): a load never
    # waits for another model's probe, which on a large model takes seconds (review of
    # 4b12d58: with one lock per first hex digit, 1 in 16 loads beside another did).
    lock = FileLock(file.parent / f".probing-{key}.lock")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=wait)
    except (Timeout, OSError) as exc:
        log.warning("probing without waiting for another process's verdict (%s)", exc)
        return probe()
    try:
        cache = VerdictCache(file)
        exact = cache.get(key)
        if exact is None:
            exact = probe()
            cache.put(key, exact)
        return exact
    finally:
        lock.release()


@functools.cache
def _llama_build() -> str:
    """llama-cpp-python's version and its compiled libraries (name, size, modification
    time): a rebuild at the same version with other CMAKE_ARGS (CUDA, Vulkan, Metal, BLAS,
    native or not) has other kernels, so its verdict is its own."""
    from importlib import metadata  # here: its email parser is no cost of a worker's start

    try:
        version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:  # a bundle without the metadata
        version = "unknown"
    spec = importlib.util.find_spec("llama_cpp")
    libraries: list[str] = []
    if spec is not None and spec.origin is not None:
        for lib in sorted((Path(spec.origin).parent / "lib").glob("*")):
            with contextlib.suppress(OSError):
                stat = lib.stat()
                libraries.append(f"{lib.name}:{stat.st_size}:{stat.st_mtime_ns}")
    return ";".join([version, *libraries])


@functools.cache
def _processor() -> str:
    """The CPU model (llama.cpp picks its kernels by the CPU's features): /proc/cpuinfo's
    first `model name` and `flags` on Linux, else what the platform module knows."""
    with contextlib.suppress(OSError):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        wanted = ("model name", "flags", "Features", "CPU part")
        return ";".join(next((x for x in lines if x.startswith(w)), "") for w in wanted)
    return f"{platform.machine()} {platform.processor()}"
