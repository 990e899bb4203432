"""The one way the core tells its listeners: call each, log a failing one, keep going."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)


def notify(listeners: Iterable[Callable[..., object]], *args: object) -> None:
    """Call every listener with `args`. What they hear about has already happened (a commit,
    a model event): a listener that raises is logged with its traceback and the others are
    still called, so one broken view cannot make the change look failed or hide it from the
    rest. The list is copied first: a listener may remove itself."""
    for listener in list(listeners):
        try:
            listener(*args)
        except Exception:
            log.exception("listener %r failed on %r", listener, args)
