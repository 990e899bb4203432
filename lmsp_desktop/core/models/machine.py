"""How much memory this machine can give a model load: RAM (MemAvailable, a cgroup's limit)
and, where llama.cpp was built with a GPU backend, each device's free memory."""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Overrides the available-memory reading (bytes, or with a K/M/G/T suffix): for containers
# whose limit is not visible in /proc or /sys, and for tests of the refusal (docs/memory.md).
AVAILABLE_ENV = "LMSP_MEMORY_AVAILABLE"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_NO_LIMIT = 1 << 60  # cgroup v1 writes a huge number for "no limit"


@dataclass(frozen=True)
class HostMemory:
    """RAM a load can use: `available` now, out of `total`, and where the figure came from."""

    total: int
    available: int
    source: str  # "MemAvailable", "cgroup v2 limit", "cgroup v1 limit" or the override


@dataclass(frozen=True)
class GpuDevice:
    name: str
    free: int
    total: int


def resident_memory(pid: int | None = None) -> int | None:
    """A process's resident memory in bytes (this one's when `pid` is None), where the system
    says it (Linux's /proc); None elsewhere or once the process is gone."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def parse_size(text: str) -> int:
    """`"2G"` → 2147483648; plain numbers are bytes. Raises ValueError."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size (bytes, or a number with K, M, G or T)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def _meminfo(root: Path) -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        text = (root / "proc/meminfo").read_text()
    except OSError:
        return values
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return values


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _inactive_file(stat: Path) -> int:
    """Page cache the kernel can drop inside a cgroup (counted in its usage)."""
    try:
        for line in stat.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name in ("inactive_file", "total_inactive_file") and value.isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _cgroup_limit(root: Path) -> tuple[int, int, str] | None:
    """(limit, usage that cannot be dropped, version) of the tightest memory limit of this
    process's cgroup and its parents; None when there is none."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    best: tuple[int, int, str] | None = None
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: walk from this cgroup up to the root
            node = root / "sys/fs/cgroup" / path.lstrip("/")
            base = root / "sys/fs/cgroup"
            while True:
                raw = None
                try:
                    raw = (node / "memory.max").read_text().strip()
                except OSError:
                    pass
                limit = int(raw) if raw and raw.isdigit() else None
                usage = _read_int(node / "memory.current")
                if limit is not None and usage is not None:
                    used = usage - _inactive_file(node / "memory.stat")
                    if best is None or limit - used < best[0] - best[1]:
                        best = (limit, used, "cgroup v2 limit")
                if node == base or base not in node.parents:
                    break
                node = node.parent
        elif "memory" in controllers.split(","):
            node = root / "sys/fs/cgroup/memory" / path.lstrip("/")
            for where in (node, root / "sys/fs/cgroup/memory"):
                limit = _read_int(where / "memory.limit_in_bytes")
                usage = _read_int(where / "memory.usage_in_bytes")
                if limit is not None and usage is not None and limit < _NO_LIMIT:
                    used = usage - _inactive_file(where / "memory.stat")
                    if best is None or limit - used < best[0] - best[1]:
                        best = (limit, used, "cgroup v1 limit")
                    break
    return best


def host_memory(root: Path = Path("/")) -> HostMemory:
    """RAM available to a load now: the smaller of MemAvailable and what this process's
    cgroup limit leaves; LMSP_MEMORY_AVAILABLE, when set, replaces the available figure."""
    info = _meminfo(root)
    total = info.get("MemTotal", 0)
    available = info.get("MemAvailable", info.get("MemFree", 0))
    source = "MemAvailable"
    limit = _cgroup_limit(root)
    if limit is not None:
        cap, used, version = limit
        if cap < total or not total:
            total = cap
        if cap - used < available or not available:
            available, source = max(0, cap - used), version
    override = os.environ.get(AVAILABLE_ENV)
    if override:
        try:
            available, source = parse_size(override), f"{AVAILABLE_ENV}={override}"
        except ValueError:
            log.warning("ignoring %s: %r is not a size like 8G", AVAILABLE_ENV, override)
    if not total:
        total = available
    return HostMemory(total=total, available=available, source=source)


def gpu_devices() -> list[GpuDevice]:
    """The GPUs llama.cpp can offload to, with their free memory (ggml's backend device API,
    which llama-cpp-python does not wrap); [] for a CPU-only build."""
    try:
        lib_dir = llama_lib_dir()
        llama = _library(lib_dir, LLAMA_LIBRARIES)
        if llama is None:
            return []
        llama.llama_supports_gpu_offload.restype = ctypes.c_bool
        if not llama.llama_supports_gpu_offload():
            return []
        lib = _library(
            lib_dir, ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll", "libggml.so")
        )
    except Exception:  # no llama.cpp here, or a build whose library is laid out otherwise
        log.debug("cannot ask llama.cpp for GPU devices", exc_info=True)
        return []
    if lib is None:
        return []
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_name.restype = ctypes.c_char_p
    lib.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_memory.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    devices = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        # enum ggml_backend_dev_type: 0 CPU, 1 GPU, 2 integrated GPU, 3 accelerator
        if lib.ggml_backend_dev_type(dev) not in (1, 2):
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        name = (lib.ggml_backend_dev_name(dev) or b"GPU").decode("utf-8", "replace")
        devices.append(GpuDevice(name, int(free.value), int(total.value)))
    return devices


LLAMA_LIBRARIES = ("libllama.so", "libllama.dylib", "llama.dll")


def llama_lib_dir() -> Path:
    """llama-cpp-python's folder of shared libraries, found without importing the package:
    `import llama_cpp` imports numpy, jinja and the chat formats (~0.3 s of CPU in `models
    list` and in `serve`, whose engines run in workers) for the two C calls made here. The
    library loaded here is the same file llama_cpp loads (the loader shares it), from the
    folder LLAMA_CPP_LIB_PATH names where it is set (a GPU build beside the bundled one), as
    llama_cpp's own loader does."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override is not None:
        return Path(override)
    package = importlib.util.find_spec("llama_cpp")  # finds the folder, runs nothing
    if package is None or not package.submodule_search_locations:
        raise ImportError("llama-cpp-python is not installed")
    return Path(package.submodule_search_locations[0]) / "lib"


def _library(lib_dir: Path, names: tuple[str, ...]) -> ctypes.CDLL | None:
    for name in names:
        if (lib_dir / name).exists():
            # The mode llama_cpp loads it with on Linux and macOS (its default): the loader
            # hands both the same handle, so the process holds one copy of the library.
            return ctypes.CDLL(str(lib_dir / name))
    return None
