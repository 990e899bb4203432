"""The one way a test waits for a condition: poll it on the running loop, never block it
(`until`); a test with no loop of its own polls with `until_sync`."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

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
            _time_out(predicate, limit, what)
        await asyncio.sleep(interval)


def until_sync(
    predicate: Callable[[], T],
    limit: float = 20.0,
    what: str | Callable[[], object] = "",
    interval: float = 0.02,
) -> T:
    """`until` for a test without an event loop to keep running: one that drives another
    process (`serve`, an upstream server) or a core on its own thread with blocking calls.
    Blocks between checks; returns the predicate's truthy value; same `limit` and `what`."""
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            _time_out(predicate, limit, what)
        time.sleep(interval)


def _time_out(predicate: object, limit: float, what: str | Callable[[], object]) -> NoReturn:
    described = what() if callable(what) else what or predicate
    pytest.fail(f"timed out after {limit} s waiting for {described}")
