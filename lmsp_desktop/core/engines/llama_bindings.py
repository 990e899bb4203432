"""llama.cpp's ctypes bindings (`llama_cpp/llama_cpp.py`) without the rest of llama-cpp-python.

Importing any module of the `llama_cpp` package runs its `__init__`, which imports its
high-level API: numpy, the chat formats and jinja2 (~0.1 CPU-s, most of what the service paid
to count its first request's tokens). The service process needs a dozen C calls. So the
bindings' file is loaded here as a module of its own, under this package's name: the
`llama_cpp` package is left alone, and a process that also imports it (tests, benches) gets
it exactly as a plain import makes it, with its own copy of the bindings (the same library:
the loader hands both the same handle).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import re
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

PACKAGE = "llama_cpp"
BINDINGS = "llama_cpp.llama_cpp"
EXTENSIONS = "llama_cpp._ctypes_extensions"  # the bindings import it by this name
PRIVATE = "lmsp_desktop.core.engines.llama_bindings.lowlevel"
_LOCK = threading.Lock()
_quiet: list[tuple[Any, bool]] = []  # callbacks handed to llama.cpp (alive with the process)
# ggml's log levels (ggml.h, enum ggml_log_level: NONE, DEBUG, INFO, WARN, ERROR, CONT).
GGML_LOG_LEVEL_WARN = 3
GGML_LOG_LEVEL_ERROR = 4
PACKAGE_LOGGER = "llama_cpp._logger"  # llama-cpp-python's, which sets its own callback
# What llama.cpp logs as errors when an abort callback stopped a decode (log_line).
ABORTED_DECODE = re.compile(
    r"(?:compute_async failed with error 1|failed to compute graph, compute status: 1"
    r"|llama_decode: failed to decode, ret = 2)$"
)


def bindings() -> Any:
    """The bindings module (llama_cpp's own where the package is imported already), with
    llama.cpp's INFO logs (a screenful per load) kept off stderr."""
    with _LOCK:
        module = sys.modules.get(BINDINGS) or sys.modules.get(PRIVATE) or _load()
        keep_quiet(module)
    return module


def _load() -> ModuleType:
    spec = importlib.util.find_spec(PACKAGE)  # finds the folder, runs nothing
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("llama-cpp-python is not installed")
    folder = Path(spec.submodule_search_locations[0])
    # The bindings say `from llama_cpp._ctypes_extensions import ...`: a module found in
    # sys.modules under that name is used without importing its package. It is put there
    # only while they load, complete (a plain import of the package meanwhile may use it).
    extensions = sys.modules.get(EXTENSIONS)
    added = extensions is None
    if extensions is None:
        extensions = _module(EXTENSIONS, folder / "_ctypes_extensions.py")
        sys.modules[EXTENSIONS] = extensions
    try:
        module = _module(PRIVATE, folder / "llama_cpp.py")
    finally:
        if added and sys.modules.get(EXTENSIONS) is extensions and PACKAGE not in sys.modules:
            del sys.modules[EXTENSIONS]
    sys.modules[PRIVATE] = module
    return module


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log_line(level: int, line: str) -> None:
    """One line of llama.cpp's log: errors as warnings, warnings at debug, the rest nowhere.
    The errors llama.cpp writes when a decode stops because the engine's abort callback
    asked it to (a cancel during a prompt read, llama_batch.py) are no errors: ggml's status
    1 is GGML_STATUS_ABORTED, and llama_decode's 2 is its "aborted" (llama-context.cpp);
    only an abort callback makes them, and only the engine sets one. Those go to debug; a
    decode that really fails (another status) still logs."""
    if level == GGML_LOG_LEVEL_ERROR and not ABORTED_DECODE.search(line):
        log.warning("llama.cpp: %s", line)
    elif level in (GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR):
        log.debug("llama.cpp: %s", line)


def keep_quiet(lowlevel: Any) -> None:
    """llama.cpp logs to stderr unless given a callback: its errors go to this module's log
    as warnings, its warnings at debug (the log file), the rest nowhere. Not llama-cpp-
    python's callback (its logger, loaded with the package): it reads ggml's levels one off,
    so llama.cpp's warnings reached serve's terminal as errors ("model default pooling_type
    is [-1], but [1] was specified" at every embedding load). Set after that logger is
    loaded, which sets its own callback when it is: a process that loads the package later
    gets it here again."""
    if _quiet and (_quiet[-1][1] or PACKAGE_LOGGER not in sys.modules):
        return  # ours is the one llama.cpp has

    def to_log(level: int, text: bytes, _user: Any) -> None:
        log_line(level, text.decode("utf-8", "replace").rstrip())

    callback = lowlevel.llama_log_callback(to_log)
    lowlevel.llama_log_set(callback, ctypes.c_void_p(0))
    _quiet.append((callback, PACKAGE_LOGGER in sys.modules))
