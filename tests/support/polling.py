"""The one way a test waits for a condition: poll it on the running loop, never block it."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


async def until(
    predicate: Callable[[], T | Awaitable[T]],
    limit: float = 20.0,
    what: str | Callable[[], object] = "",
    interval: float = 0.02,
) -> T:
    """Await until `predicate()` is truthy and return that value.

    `predicate` may be a plain function (a widget's text) or return an awaitable (a row of the
    store, an HTTP answer). The loop runs between checks, so Qt paints and asyncio tasks go on;
    never use qtbot.wait* in an async test instead (a nested Qt loop drops asyncio tasks).
    `limit` is generous because the machines running the suite are shared and loaded; it is a
    bound on a hang, not a timing assertion. `what` names the condition in the failure; a
    callable is asked at that moment, so it can say what was seen instead.
    """
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            described = what() if callable(what) else what or predicate
            pytest.fail(f"timed out after {limit} s waiting for {described}")
        await asyncio.sleep(interval)
