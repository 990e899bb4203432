"""The core's one way to notify listeners: each is called; a failing one is logged with its
traceback and the rest still hear."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from lmsp_desktop.core.listeners import notify


def test_a_failing_listener_is_logged_and_the_others_still_hear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[tuple[object, ...]] = []

    def broken(*args: object) -> None:
        raise ValueError("broken view")

    listeners = [lambda *a: heard.append(("first", *a)), broken, lambda *a: heard.append(a)]
    with caplog.at_level(logging.ERROR, logger="lmsp_desktop.core.listeners"):
        notify(listeners, "task_1", 3)
    assert heard == [("first", "task_1", 3), ("task_1", 3)]
    [record] = caplog.records
    assert record.exc_info is not None and "broken view" in str(record.exc_info[1])


def test_a_listener_may_remove_itself_while_being_told() -> None:
    listeners: list[Callable[[str], object]] = []
    heard: list[str] = []

    def once(value: str) -> None:
        heard.append(value)
        listeners.remove(once)

    listeners += [once, heard.append]
    notify(listeners, "a")
    notify(listeners, "b")
    assert heard == ["a", "a", "b"]
