"""Prompt priority among one loaded model's contexts (each decoded by its own thread,
llama_batch.BatchDecoder), as llama-server schedules its slots: a prompt is read at full
speed, and the sequences already generating keep streaming, slowly.

While a context has a prompt to read, its chunks are decoded on every core and the model's
other contexts wait; between two chunks every context with generating sequences takes one
step (one token of each of them, on its own thread, the contexts side by side), then the
next chunk goes. Two prompts at once: first come, first read (the order the contexts
admitted them); the later one waits for the earlier one's last chunk. A context waiting
here still sees its own sequences' cancels (it looks every POLL_S): a cancelled sequence
leaves at once, not after the chunk. See docs/prefill.md for the figures.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

# How often a context waiting for a chunk (or for its turn to read) looks for a cancel of
# its own sequences: well inside B8's one token + 50 ms.
POLL_S = 0.01


class Cores:
    """The cores one loaded model's contexts share, and whose turn it is to use them."""

    def __init__(self, count: int) -> None:
        self.count = max(1, count)
        self._changed = threading.Condition()
        self._streaming: set[int] = set()  # contexts with generating sequences
        self._stepping: set[int] = set()  # contexts decoding their step right now
        self._stepped: set[int] = set()  # contexts that took a step since the last chunk
        self._readers: dict[int, int] = {}  # context -> ticket of its first prompt to read
        self._reading: int | None = None  # the context reading a chunk on every core
        self._tickets = itertools.count()

    def ticket(self) -> int:
        """A prompt's place in the model's reading order (taken when it is admitted)."""
        with self._changed:
            return next(self._tickets)

    def state(self, owner: int, *, streaming: bool, ticket: int | None) -> None:
        """What context `owner` has to do from now on: generating sequences or not, and the
        ticket of its first prompt still to read (None: no prompt). Said at each step, and
        before it goes idle (the reading context waits for the streaming ones' steps)."""
        with self._changed:
            if streaming:
                self._streaming.add(owner)
            else:
                self._streaming.discard(owner)
            if ticket is None:
                self._readers.pop(owner, None)
            else:
                self._readers[owner] = ticket
            self._changed.notify_all()

    def streaming(self) -> bool:
        """Whether any context of the model has generating sequences."""
        with self._changed:
            return bool(self._streaming)

    def begin_step(self, owner: int, interrupted: Callable[[], bool]) -> bool:
        """Wait until `owner` may decode its generating sequences' next tokens: no chunk is
        being read, and (while another context's prompt waits) it has not stepped since the
        last chunk. False when `interrupted()` (a cancel) came first; else end_step must
        follow."""
        with self._changed:
            while self._reading is not None or (
                self._first() not in (None, owner) and owner in self._stepped
            ):
                if interrupted():
                    return False
                self._changed.wait(POLL_S)
            self._stepping.add(owner)
            return True

    def end_step(self, owner: int) -> None:
        with self._changed:
            self._stepping.discard(owner)
            self._stepped.add(owner)
            self._changed.notify_all()

    def begin_chunk(self, owner: int, *, wait_turn: bool, interrupted: Callable[[], bool]) -> bool:
        """Wait until `owner` may read a prompt chunk on every core: its prompt is the first
        to read, no other context is decoding, and every other streaming context has taken
        its step since the last chunk. A context with generating sequences does not wait
        for its turn (`wait_turn` False: they take their steps meanwhile). False when it is
        not its turn or `interrupted()`; else end_chunk must follow."""
        with self._changed:
            while True:
                first = self._first() == owner
                others_done = (self._streaming - {owner}) <= self._stepped
                if first and others_done and not self._stepping - {owner}:
                    self._reading = owner
                    return True
                if (not first and not wait_turn) or interrupted():
                    return False
                self._changed.wait(POLL_S)

    def _first(self) -> int | None:
        """The context whose prompt is read first (the lowest ticket)."""
        return min(self._readers, key=self._readers.__getitem__, default=None)

    def end_chunk(self, owner: int) -> None:
        """The chunk is read: every streaming context gets a step before the next one."""
        with self._changed:
            if self._reading == owner:
                self._reading = None
            self._stepped.clear()
            self._changed.notify_all()
