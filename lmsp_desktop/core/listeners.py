"""The one way the core tells its listeners: call each, log a failing one, keep going."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def notify(listeners: Iterable[Callable[[T], object]], value: T) -> None:
    """Call every listener with `value`. What they hear about has already happened (a commit,
    a model event): a listener that raises is logged with its traceback and the others are
    still called, so one broken view cannot make the change look failed or hide it from the
    rest. The list is copied first: a listener may remove itself."""
    for listener in list(listeners):
        try:
            listener(value)
        except Exception:
            log.exception("listener %r failed on %r", listener, value)
