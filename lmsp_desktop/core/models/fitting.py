"""Sizing loads to the machine: the plan for a model (its settings fitted to the memory
available), the refusal of one that cannot fit, and what /v1/models and the window show.

One object, held by the core, used by every path that needs a model's load settings: the
runner before a load, task creation (507 before a task exists), /v1/models and the Models
page; so they all agree."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines.base import EngineError, LoadSettings
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models import machine
from lmsp_desktop.core.models.gguf_meta import read_model_meta
from lmsp_desktop.core.models.info import CHANGED, ModelInfo
from lmsp_desktop.core.models.memory import (
    Budget,
    CapOrigin,
    ModelSettings,
    ModelShape,
    Plan,
    Shapes,
    plan,
)
from lmsp_desktop.core.storage import model_settings as stored
from lmsp_desktop.core.storage.db import Database

log = logging.getLogger(__name__)
GPU_CACHE_S = 5.0  # asking the GPU driver for free memory is cheap, but not per request
INSUFFICIENT = "insufficient_memory"


class InsufficientMemory(LmspError):
    """A load that cannot fit: 507 (LMSP_API.md, "Models: sources, digests, memory")."""

    status = 507
    type = "server_error"


def is_local(info: ModelInfo) -> bool:
    """A model file this machine loads (not an upstream's model; Ollama's blobs have no
    .gguf suffix)."""
    return getattr(info, "source", "upstream") != "upstream"


class ModelFitter:
    """Decides each local model's load settings from its stored settings, its header and
    the memory available, with the engine's own context layout (`shapes_of`)."""

    def __init__(
        self,
        db: Database,
        shapes_of: Shapes,
        *,
        default_parallel: Callable[[], int],
        context_cap: Callable[[], int],
        cap_origin: CapOrigin = CapOrigin.SETTINGS,
        memory: Callable[[], machine.HostMemory] = machine.host_memory,
        gpus: Callable[[], list[machine.GpuDevice]] = machine.gpu_devices,
        file_gone: Callable[[str, Path], Awaitable[None]] | None = None,
    ) -> None:
        self.db = db
        # Told when a model's header read finds no file (the registry's file_gone records it
        # missing): the estimate is often the first to notice a file deleted behind our back.
        self.file_gone = file_gone
        self.shapes_of = shapes_of
        self.default_parallel = default_parallel
        self.context_cap = context_cap
        # Where the cap comes from: fixed for a run (its flags are), kept on each plan.
        self.cap_origin = cap_origin
        self.memory = memory
        self._gpus = gpus
        self._gpu_cache: tuple[float, list[int]] = (0.0, [])
        self._shapes: dict[tuple[str, int], ModelShape] = {}
        # The plan each loaded model was loaded with: its memory is in use, so a plan made
        # now would count it twice; /v1/models shows what it really runs with.
        self.loaded: dict[str, Plan] = {}

    # -- reading the model and the machine ------------------------------------------------
    def shape(self, info: ModelInfo, *, look: bool = False) -> ModelShape:
        """The model's shape from its header, every part's of a split model (blocking:
        milliseconds; cached per file). `look`: a kept shape only while the file is there
        (FileNotFoundError otherwise)."""
        key = (str(info.path), info.mtime_ns)
        found = self._shapes.get(key)
        if found is not None and look:
            os.stat(info.path)  # gone since its shape was read: file_gone hears of it
        if found is None:
            found = ModelShape.from_gguf(read_model_meta(Path(info.path)), info.size_bytes)
            self._shapes[key] = found
        return found

    def budget(self, reclaimable: int = 0) -> Budget:
        host = self.memory()
        return Budget(host.total, host.available + reclaimable, host.source)

    def gpu_free(self) -> list[int]:
        at, free = self._gpu_cache
        if time.monotonic() - at > GPU_CACHE_S:
            free = [device.free for device in self._gpus()]
            self._gpu_cache = (time.monotonic(), free)
        return free

    # -- planning -------------------------------------------------------------------------
    def plan_sync(
        self, info: ModelInfo, wanted: ModelSettings, reclaimable: int = 0, look: bool = False
    ) -> Plan:
        return plan(
            self.shape(info, look=look),
            wanted,
            self.budget(reclaimable),
            self.shapes_of,
            default_parallel=self.default_parallel(),
            context_cap=self.context_cap(),
            cap_origin=self.cap_origin,
            gpus=self.gpu_free(),
        )

    async def plan(
        self,
        info: ModelInfo,
        wanted: ModelSettings | None = None,
        reclaimable: int = 0,
        *,
        look: bool = True,
    ) -> Plan:
        """The plan for loading `info` now with `wanted` (None: its stored settings). `look`:
        check the file is still there (a stat; not on the create path, admit), so the Models
        page's estimates, GET /v1/models and `models list` notice a file deleted since."""
        if wanted is None:
            wanted = await stored.get_settings(self.db, info.id)
        try:
            decided = await asyncio.to_thread(self.plan_sync, info, wanted, reclaimable, look)
        except FileNotFoundError:
            if self.file_gone is not None:
                try:
                    await self.file_gone(info.id, Path(info.path))
                except Exception:  # noticing is a courtesy: the plan's answer stands
                    log.warning("could not record %s missing", info.id, exc_info=True)
            raise
        if info.state == CHANGED:
            # Its header was read from the verified file: a file copied over it showed the
            # old file's "fits" as its own.
            verified = (
                "This estimate is of the file verified before; the file now at its path is "
                "not verified (it changed), so it is not loaded until you verify it again or "
                "accept it."
            )
            reason = f"{decided.reason} {verified}" if decided.reason else verified
            decided = dataclasses.replace(decided, reason=reason)
        return decided

    async def current(self, info: ModelInfo) -> Plan | None:
        """What the model runs with when loaded, else would run with now; None for an
        upstream's model or a header that cannot be read (the registry reports that)."""
        if not is_local(info):
            return None
        loaded = self.loaded.get(info.id)
        if loaded is not None:
            return loaded
        try:
            return await self.plan(info)
        except (OSError, ValueError) as exc:
            log.debug("no memory plan for %s: %s", info.id, exc)
            return None

    async def settings_for_load(self, info: ModelInfo, reclaimable: int = 0) -> LoadSettings:
        """The settings to load with, or EngineError insufficient_memory when the load
        would not fit the memory available: refused before anything is allocated."""
        decided = await self.plan(info, reclaimable=reclaimable)
        if decided.fit == "wont_fit":
            raise EngineError(INSUFFICIENT, decided.reason)
        if decided.fit == "tight":
            log.warning("loading %s: %s", info.id, decided.reason)
        self.loaded[info.id] = decided
        return decided.settings

    async def admit(self, info: ModelInfo, loaded_state: str, reclaimable: int = 0) -> Plan | None:
        """Before a task is created: the plan the model runs with, its context among the
        rest (None: not a local model, or a header that cannot be read), or 507 when the
        model is not loaded and its load could not fit. A model already loaded (or loading)
        has its memory."""
        if not is_local(info):
            return None
        loaded = self.loaded.get(info.id)
        if loaded is not None and loaded_state != "unloaded":
            return loaded
        try:
            decided = await self.plan(info, reclaimable=reclaimable, look=False)
        except (OSError, ValueError):
            return None  # an unreadable header: the load reports it
        if decided.fit == "wont_fit" and loaded_state == "unloaded":
            raise InsufficientMemory(decided.reason, code=INSUFFICIENT, param="model")
        return decided

    def unloaded(self, model_id: str) -> None:
        self.loaded.pop(model_id, None)

    def api_fields(self, info: ModelInfo, decided: Plan | None) -> dict[str, Any]:
        """`context_length`, `trained_context_length` and `memory_estimate` of /v1/models."""
        if decided is None:
            return {}
        return {
            "context_length": decided.context_length,
            "trained_context_length": decided.trained_context,
            "memory_estimate": decided.estimate.total,
        }
