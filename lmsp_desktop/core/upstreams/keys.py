"""Upstream API keys in the OS keyring when there is one, else in the 0600 database.

A key must stay usable (it is sent to the upstream), so it cannot be hashed like our own
tokens. It is never logged, never returned by the API and never shown in the window.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
SERVICE = "lmsp-desktop upstream"


def _keyring() -> Any:
    """The keyring module if a real (non-failing) backend is available, else None."""
    try:
        import keyring
        from keyring.backends import fail
    except ImportError:
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:  # a broken backend configuration: act as if there were none
        return None
    if isinstance(backend, fail.Keyring):
        return None
    return keyring


def keyring_available() -> bool:
    return _keyring() is not None


def save_key(name: str, key: str) -> bool:
    """Store the key in the keyring; False when there is none (the caller keeps it in the
    database instead)."""
    ring = _keyring()
    if ring is None:
        return False
    try:
        ring.set_password(SERVICE, name, key)
    except Exception as exc:  # locked or refusing keyring: fall back, say why (not the key)
        log.warning("the OS keyring refused the key of upstream %s (%s)", name, type(exc).__name__)
        return False
    return True


def load_key(name: str) -> str | None:
    ring = _keyring()
    if ring is None:
        return None
    try:
        value = ring.get_password(SERVICE, name)
    except Exception as exc:
        log.warning("cannot read the key of upstream %s from the keyring (%s)", name, exc)
        return None
    return value if isinstance(value, str) else None


def delete_key(name: str) -> None:
    ring = _keyring()
    if ring is None:
        return
    try:
        ring.delete_password(SERVICE, name)
    except Exception:  # not there: nothing to delete
        log.debug("no keyring entry for upstream %s", name)
