"""Start a part of the service for the length of a `with` block and stop it however it ends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar


class Startable(Protocol):
    """A Runner or a Core: started and stopped by coroutines."""

    async def start(self) -> Any: ...

    async def stop(self) -> Any: ...


S = TypeVar("S", bound=Startable)


@contextlib.asynccontextmanager
async def started(part: S) -> AsyncIterator[S]:
    """`async with started(Runner(...)) as runner:` (or a Core): start it, yield it, and stop it
    even when the block fails, so one failing test never leaves tasks running into the next."""
    await part.start()
    try:
        yield part
    finally:
        await part.stop()
