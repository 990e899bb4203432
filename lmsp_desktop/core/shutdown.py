"""Stop steps that all run: a step that fails is logged with its traceback and the later steps
still run, so one failure never leaves a model loaded, the store open or the data-directory
lock held. The first failure is raised once every step has run."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class StopSteps:
    """`steps = StopSteps("stopping the service")`, then `await steps.run("closing X", x.close)`
    for each step in order, then `steps.raise_first()`."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failures: list[BaseException] = []

    async def run(self, name: str, step: Callable[[], object]) -> None:
        """Run one step (a plain function or a coroutine function). Catches BaseException too:
        a cancellation or Ctrl+C arriving mid-stop must not skip the lock's release; it is
        raised again by raise_first."""
        try:
            result = step()
            if inspect.isawaitable(result):
                await result
        except BaseException as exc:
            log.error("%s: %s failed; the later steps run anyway", self.what, name, exc_info=exc)
            self.failures.append(exc)

    def raise_first(self) -> None:
        """Raise the first failure, if any, noting how many later steps failed too."""
        if not self.failures:
            return
        first = self.failures[0]
        if len(self.failures) > 1:
            first.add_note(
                f"{len(self.failures) - 1} later step(s) of {self.what} failed too; see the log"
            )
        raise first
