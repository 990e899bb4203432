"""Engine worker processes: each loaded local model runs llama.cpp in its own process.

WorkerEngine and WorkerModel (client.py) are the service's side, imported on first use: an
engine worker imports this package too (`python -m lmsp_desktop.core.engines.worker`), and
the service's side (subprocess, the verdict cache with importlib.metadata and its email
parser) is a few hundredths of a CPU-second of every worker's start it never uses (B17).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lmsp_desktop.core.engines.worker.client import WorkerEngine, WorkerModel

__all__ = ["WorkerEngine", "WorkerModel"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from lmsp_desktop.core.engines.worker import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
