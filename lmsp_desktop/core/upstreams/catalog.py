"""The registered upstreams as a running service sees them: read from the `upstreams` table
(changes by the CLI or the window are picked up within a second, no restart), probed now and
then for reachability, latency and models, and turned into model entries and engines."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmsp_desktop.core.errors import LmspError, not_found
from lmsp_desktop.core.listeners import notify
from lmsp_desktop.core.models.info import VERIFIED, ModelInfo
from lmsp_desktop.core.storage.db import Database
from lmsp_desktop.core.storage.upstreams import (
    NAME_RE,
    UpstreamRow,
    list_upstreams,
    upstreams_version,
)
from lmsp_desktop.core.upstreams.client import Probe, UpstreamClient
from lmsp_desktop.core.upstreams.engine import Upstream, UpstreamEngine

log = logging.getLogger(__name__)
TABLE_POLL_S = 1.0  # how soon a running service notices `upstream add/remove`
PROBE_EVERY_S = 15.0  # how often each upstream's /v1/models is looked at
DOWN_PROBE_EVERY_S = 5.0  # sooner while one is down, so the app shows it back soon


@dataclass
class UpstreamModelInfo(ModelInfo):
    """A model served by an upstream, listed beside the local files."""

    upstream: str = ""
    base_url: str = ""
    reachable: bool = False
    latency_ms: float | None = None
    model_count: int = 0
    upstream_error: str | None = None

    @property
    def source(self) -> str:
        return "upstream"

    def as_api(self, loaded_state: str = "unloaded") -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "model",
            "created": self.created_at,
            "owned_by": self.upstream,
            "digest": None,
            "size_bytes": None,
            "format": "upstream",
            "architecture": None,
            "parameters": None,
            "quantization": None,
            "context_length": self.context_length,
            # Reachable: ready to run now. Down: tasks are still accepted, retried with
            # backoff and failed with upstream_unavailable if it stays down.
            "state": "loaded" if self.reachable else "unloaded",
            "verified_at": None,
            "source": self.source,
            "upstream": {
                "name": self.upstream,
                "base_url": self.base_url,
                "reachable": self.reachable,
                "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 1),
                "model_count": self.model_count,
                "error": self.upstream_error,
            },
        }


@dataclass
class UpstreamStatus:
    """One upstream for the window and `upstream list`: its settings and the last probe."""

    row: UpstreamRow
    probe: Probe | None

    def public(self) -> dict[str, Any]:
        probe = self.probe
        return {
            **self.row.public(),
            "reachable": bool(probe and probe.reachable),
            "latency_ms": None
            if probe is None or probe.latency_ms is None
            else round(probe.latency_ms, 1),
            "model_count": len(probe.models) if probe else 0,
            "models": [m["id"] for m in probe.models] if probe else [],
            "kind": probe.kind if probe else None,
            "error": probe.error if probe else None,
            "checked_at": int(probe.checked_at) if probe else None,
        }


class UpstreamCatalog:
    """Upstreams by name, their last probes, and the engines the runner asks for."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.listeners: list[Callable[[], None]] = []
        self._rows: dict[str, UpstreamRow] = {}
        self._upstreams: dict[str, Upstream] = {}
        self._probes: dict[str, Probe] = {}
        self._version: tuple[int, float] | None = None
        self._retired: list[Upstream] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._probe_now = asyncio.Event()

    # -- the runner's view -----------------------------------------------------------------
    def owns(self, model_id: object) -> bool:
        return isinstance(model_id, str) and model_id.partition("/")[0] in self._upstreams

    def engine_for(self, model_id: str) -> UpstreamEngine | None:
        name, _, remote = model_id.partition("/")
        upstream = self._upstreams.get(name)
        return upstream.engine(remote) if upstream is not None and remote else None

    def parallel_for(self, model_id: str) -> int:
        upstream = self._upstreams.get(model_id.partition("/")[0])
        return upstream.max_concurrency if upstream is not None else 1

    # -- the models list -------------------------------------------------------------------
    def infos(self) -> list[UpstreamModelInfo]:
        found = []
        for name in sorted(self._rows):
            probe = self._probes.get(name)
            for model in probe.models if probe else []:
                found.append(self._info(name, model))
        return found

    def info(self, model_id: str) -> UpstreamModelInfo:
        name, _, remote = model_id.partition("/")
        if name not in self._rows:
            # Only a well-formed name is echoed back (the id is the client's input).
            named = f" named {name}" if NAME_RE.fullmatch(name) else " of that name"
            raise not_found(
                f"There is no such model: no upstream{named} is registered. GET /v1/models "
                "lists the models; `lmsp-desktop upstream list` the upstreams.",
                code="model_not_found",
                param="model",
            )
        probe = self._probes.get(name)
        if probe is not None:
            for model in probe.models:
                if model["id"] == remote:
                    return self._info(name, model)
        if remote and (probe is None or not probe.reachable or not probe.models):
            # Down (or not looked at yet): accept the task; it is retried and fails with
            # upstream_unavailable if the upstream stays away.
            return self._info(name, {"id": remote})
        raise not_found(
            f"The upstream {name} has no model {remote!r}. GET /v1/models lists its models "
            f"as {name}/<model>.",
            code="model_not_found",
            param="model",
        )

    def _info(self, name: str, model: dict[str, Any]) -> UpstreamModelInfo:
        row = self._rows[name]
        probe = self._probes.get(name)
        context = model.get("context_length", model.get("max_model_len"))
        created = model.get("created")
        return UpstreamModelInfo(
            id=f"{name}/{model['id']}",
            path=Path(name) / "upstream",
            size_bytes=0,
            mtime_ns=0,
            digest=None,
            state=VERIFIED,
            verified_at=None,
            architecture=None,
            parameters=None,
            quantization=None,
            context_length=context if isinstance(context, int) else None,
            created_at=created if isinstance(created, int) else row.created_at,
            upstream=name,
            base_url=row.base_url,
            reachable=bool(probe and probe.reachable),
            latency_ms=probe.latency_ms if probe else None,
            model_count=len(probe.models) if probe else 0,
            upstream_error=probe.error if probe else None,
        )

    def statuses(self) -> list[UpstreamStatus]:
        return [UpstreamStatus(row, self._probes.get(n)) for n, row in sorted(self._rows.items())]

    # -- keeping up with the table ---------------------------------------------------------
    async def refresh(self) -> bool:
        """Read the table if it changed; True when it did."""
        version = await upstreams_version(self.db)
        if version == self._version:
            return False
        self._version = version
        rows = {r.name: r for r in await list_upstreams(self.db, with_keys=True)}
        for name in list(self._upstreams):
            old = self._rows.get(name)
            new = rows.get(name)
            if new is None or old is None or new.updated_at != old.updated_at:
                self._retired.append(self._upstreams.pop(name))
                self._probes.pop(name, None)
        for name, row in rows.items():
            if name not in self._upstreams:
                client = UpstreamClient(name, row.base_url, row.api_key, row.timeout_s)
                upstream = Upstream(client, row.max_concurrency)
                upstream.on_fault = lambda message, n=name: self._mark_down(n, message)
                self._upstreams[name] = upstream
        # The keys stay with the clients only.
        self._rows = {name: dataclasses.replace(row, api_key=None) for name, row in rows.items()}
        self._probe_now.set()
        self._notify()
        return True

    async def probe_all(self) -> None:
        upstreams = list(self._upstreams.values())
        probes = await asyncio.gather(*(u.client.probe() for u in upstreams))
        for upstream, probe in zip(upstreams, probes, strict=True):
            if self._upstreams.get(upstream.name) is not upstream:
                continue  # replaced or removed meanwhile
            before = self._probes.get(upstream.name)
            if probe.reachable:
                upstream.kind = probe.kind
            elif before is not None:
                probe.models = before.models  # keep listing them while it is down
                probe.kind = before.kind
            if before is None or before.reachable != probe.reachable:
                log.info(
                    "upstream %s is %s%s",
                    upstream.name,
                    "reachable" if probe.reachable else "down",
                    f" ({probe.error})" if probe.error else "",
                )
            self._probes[upstream.name] = probe
        self._notify()

    def _mark_down(self, name: str, message: str) -> None:
        probe = self._probes.get(name)
        if probe is not None and probe.reachable:
            probe.reachable = False
            probe.error = message
            probe.checked_at = time.time()
            self._notify()
        self._probe_now.set()

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._watch_table(), name="upstreams:table"))
        self._tasks.append(asyncio.create_task(self._probe_forever(), name="upstreams:probe"))

    async def _watch_table(self) -> None:
        while True:
            try:
                await self.refresh()
            except LmspError as exc:
                log.warning("cannot read the upstreams table: %s", exc.message)
            await asyncio.sleep(TABLE_POLL_S)

    async def _probe_forever(self) -> None:
        while True:
            self._probe_now.clear()
            try:
                await self.probe_all()
            except Exception:
                log.exception("probing the upstreams failed")
            down = any(not p.reachable for p in self._probes.values())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._probe_now.wait(), DOWN_PROBE_EVERY_S if down else PROBE_EVERY_S
                )

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for upstream in [*self._upstreams.values(), *self._retired]:
            await upstream.client.close()

    def _notify(self) -> None:
        notify(self.listeners)
