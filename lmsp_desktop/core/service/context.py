"""What every route handler reaches through `request.app[CONTEXT]`: the running core's parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from lmsp_desktop.core.config import Settings
    from lmsp_desktop.core.storage.store import Store


@dataclass
class ServiceContext:
    """The parts of the running core the HTTP routes use (set up by the composition root)."""

    store: Store
    settings: Settings
    registry: Any = None  # core.models.registry.ModelRegistry
    runner: Any = None  # core.runner.Runner
    pairing: Any = None  # core.pairing.PairingManager
    started_at: float = 0.0
    url: str = ""
    shutting_down: bool = False
    # Drain: new responses are refused with 503 while accepted ones run to the end.
    paused: bool = False
    extras: dict[str, Any] = field(default_factory=dict)


CONTEXT = web.AppKey("lmsp_context", ServiceContext)
# The authenticated caller of a request (core.auth.Principal), set by the auth middleware.
PRINCIPAL: web.RequestKey[Any] = web.RequestKey("lmsp_principal", object)
