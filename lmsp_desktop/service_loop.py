"""The event loop `lmsp-desktop serve` runs on: uvloop where it is installed (Linux and
macOS), else asyncio's own. The headless service spends most of a request's CPU in the
loop and its transports (B1: 64 clients creating tasks, docs/reliability.md); uvloop's
took a quarter less CPU per create there. The window keeps Qt's loop (qasync).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # Windows, or a bundle built without it: the same service, slower
        return asyncio.run(main)
    return uvloop.run(main)
