"""The one place the GUI calls the core's registry, runner, pairing and client storage.

The widgets talk to these small functions instead of to the parts directly, so the parts can
be faked in unit tests and their APIs can move without touching the widgets.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

from lmsp_desktop.core.storage import clients as client_store

SCOPES = ("models:read", "responses:read", "responses:write", "admin")


async def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call `fn` and await the result when it is awaitable."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def subscribe(part: Any, callback: Any) -> bool:
    listeners = getattr(part, "listeners", None)
    if isinstance(listeners, list):
        listeners.append(callback)
        return True
    return False


def unsubscribe(part: Any, callback: Any) -> None:
    listeners = getattr(part, "listeners", None)
    if isinstance(listeners, list) and callback in listeners:
        listeners.remove(callback)


# -- models ------------------------------------------------------------------------------
async def list_models(registry: Any) -> list[Any]:
    """The registry's ModelInfo objects (empty while there is no registry)."""
    return [] if registry is None else list(await call(registry.list))


def loaded_state(runner: Any, model_id: str) -> str:
    """unloaded, loading or loaded."""
    if runner is None or not hasattr(runner, "loaded_state"):
        return "unloaded"
    return str(runner.loaded_state(model_id))


def idle_left(runner: Any, model_id: str, now: float | None = None) -> float | None:
    """Seconds until an idle loaded model is unloaded; None while in use or not loaded.

    The runner has no public call for this yet, so its slot (busy count, last use on the
    monotonic clock) is read here, the one place that knows; any surprise means "unknown".
    """
    public = getattr(runner, "idle_seconds_left", None)
    if callable(public):
        value = public(model_id)
        return None if value is None else float(value)
    try:
        slot = runner._slots.get(model_id)
        if slot is None or slot.model is None or slot.busy:
            return None
        spent = (time.monotonic() if now is None else now) - float(slot.last_used)
        return max(0.0, float(runner.idle_unload_s) - spent)
    except (AttributeError, TypeError, ValueError):
        return None


def progress_of(event: Any) -> tuple[str, float | None] | None:
    """(model id, fraction hashed) from a registry ModelEvent; fraction None once settled.

    Returns None for events that only mean "the list changed" (states, scan finished).
    """
    if getattr(event, "kind", None) != "progress" or not getattr(event, "model_id", None):
        return None
    total = event.bytes_total or 0
    fraction = event.bytes_done / total if total else 0.0
    return str(event.model_id), min(fraction, 1.0)


# -- pairing and clients -----------------------------------------------------------------
async def pending_pairings(pairing: Any) -> list[dict[str, Any]]:
    """Pending device requests: pairing_id, client_name, address, scopes, user_code,
    expires_at."""
    return [] if pairing is None else list(await call(pairing.pending))


async def approve(pairing: Any, request: dict[str, Any], scopes: list[str]) -> None:
    await call(pairing.approve, request["pairing_id"], frozenset(scopes))


async def deny(pairing: Any, request: dict[str, Any]) -> None:
    await call(pairing.deny, request["pairing_id"])


async def ignore(pairing: Any, request: dict[str, Any]) -> None:
    await call(pairing.ignore, request["pairing_id"])


async def create_claim_code(pairing: Any, scopes: list[str]) -> dict[str, Any]:
    """A one-time code ({code, expires_at, scopes}) a client exchanges for a token."""
    return dict(await call(pairing.create_claim_code, frozenset(scopes)))


async def list_clients(db: Any) -> list[dict[str, Any]]:
    return await client_store.list_clients(db, include_revoked=False)


async def revoke_client(db: Any, client_id: str) -> None:
    await client_store.revoke_client(db, client_id)


async def set_client_scopes(db: Any, client_id: str, scopes: list[str]) -> None:
    await client_store.set_scopes(db, client_id, frozenset(scopes))
