"""The event loop `lmsp-desktop serve` runs on: uvloop where it is installed (Linux and
macOS), else asyncio's own. The headless service spends most of a request's CPU in the
loop and its transports (B1: 64 clients creating tasks, docs/reliability.md); uvloop's
took a quarter less CPU per create there. The window keeps Qt's loop (qasync).

And the cyclic garbage collector set for a service (`settle_collector`, once it listens).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# Net new container objects between two young-generation passes (CPython's default: 700).
# 64 requests in flight hold tens of thousands of young objects: at 700 every pass walked
# them and promoted them, and the full passes that followed walked the whole heap (B1: 90 µs
# of a create's CPU and 95 ms pauses, docs/reliability.md). A request's objects are freed
# by reference counting when it ends; the collector is for cycles, which still get found.
YOUNG_GENERATION = 50_000


def run(main: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # Windows, or a bundle built without it: the same service, slower
        return asyncio.run(main)
    return uvloop.run(main)


def settle_collector() -> None:
    """Once the service is up: what startup made (modules, the app, caches) lives as long as
    the process, so it leaves the collector's generations (gc.freeze: never walked again),
    and young passes come every YOUNG_GENERATION net allocations instead of 700."""
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION, *gc.get_threshold()[1:])
