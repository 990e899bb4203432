"""Engine worker processes: each loaded local model runs llama.cpp in its own process."""

from lmsp_desktop.core.engines.worker.client import WorkerEngine, WorkerModel

__all__ = ["WorkerEngine", "WorkerModel"]
