"""The Hugging Face token for gated and private repos: `HF_TOKEN` when set, else the one
kept in the OS keyring (entered in the Download dialog: Keep token), else none (the library
then uses its own login, if any). Never logged, never answered, never in the database.
"""

from __future__ import annotations

import logging
import os

from lmsp_desktop.core.upstreams.keys import _keyring

log = logging.getLogger(__name__)
# The caller's own token for one `POST /v1/models/pull` (`models pull` sends its HF_TOKEN):
# used for that download's hub requests only, kept in memory, never stored, logged or answered.
HUB_TOKEN_HEADER = "X-HF-Token"
SERVICE = "lmsp-desktop huggingface"
USER = "token"


def hub_token() -> str | None:
    env = os.environ.get("HF_TOKEN")
    return env or stored_token()


def stored_token() -> str | None:
    ring = _keyring()
    if ring is None:
        return None
    try:
        value = ring.get_password(SERVICE, USER)
    except Exception as exc:
        log.warning("cannot read the Hugging Face token from the keyring (%s)", type(exc).__name__)
        return None
    return value if isinstance(value, str) and value else None


def save_token(token: str | None) -> bool:
    """Keep the token in the keyring (None or "" forgets it). False when there is no keyring
    here: the caller says to set HF_TOKEN instead."""
    ring = _keyring()
    if ring is None:
        return False
    try:
        if token:
            ring.set_password(SERVICE, USER, token)
        else:
            ring.delete_password(SERVICE, USER)
    except Exception as exc:  # locked, refusing, or nothing to delete
        log.warning("the OS keyring refused the Hugging Face token (%s)", type(exc).__name__)
        return not token
    return True
