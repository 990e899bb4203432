"""What a scan has not settled yet, so that nobody reads "not found" or "not verified" into
a model the scan is still recording or hashing.

At start-up the service listens and runs its queue while the model folders are scanned in
the background (a window paints, `/v1/health` answers at once). A task left queued by the
last run, or created meanwhile, names a model that may not be recorded yet, or whose file
is being hashed: it waits for the scan rather than failing `model_not_found` or
`model_unverified`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable

from lmsp_desktop.core.models.info import ModelEvent


class ScanGate:
    """Scans recording files right now, and the model files whose hashing a scan queued."""

    def __init__(self) -> None:
        self._recording = 0
        self.begun = 0  # scans begun so far: a lookup tells whether one began while it read
        self._recorded = asyncio.Event()
        self._recorded.set()
        self._queued: Counter[str] = Counter()  # model id → hash jobs queued or running
        self._hashed: dict[str, asyncio.Event] = {}

    def begin_recording(self) -> None:
        """A scan starts recording; call before the scan's first await (nothing may look
        models up in between) and end it with `end_recording` whatever happens."""
        self._recording += 1
        self.begun += 1
        self._recorded.clear()

    def end_recording(self, queued: Iterable[str] = ()) -> None:
        """The scan has recorded its files and queued the hashing of `queued` model ids."""
        for model_id in queued:
            self._queued[model_id] += 1
            self._hashed.setdefault(model_id, asyncio.Event())
        self._recording -= 1
        if self._recording == 0:
            self._recorded.set()

    def hash_done(self, model_id: str) -> None:
        """One queued hash job of `model_id` ended (hashed, unreadable or abandoned)."""
        if self._queued[model_id] <= 0:
            return
        self._queued[model_id] -= 1
        if self._queued[model_id] == 0:
            del self._queued[model_id]
            self._hashed.pop(model_id).set()

    @property
    def recording(self) -> bool:
        return not self._recorded.is_set()

    async def wait_recorded(self) -> None:
        """Until no scan is recording files."""
        await self._recorded.wait()

    def hash_queued(self, model_id: str) -> bool:
        """Whether a scan has queued (or is running) the hashing of `model_id`."""
        return model_id in self._hashed

    async def wait_settled(self) -> None:
        """Until no scan records files and every hash a scan queued has ended."""
        while self.recording or self._hashed:
            await self._recorded.wait()
            for hashed in list(self._hashed.values()):
                await hashed.wait()

    async def wait_hashed(self, model_id: str) -> None:
        """Until the hashing a scan queued for `model_id` has ended (at once when none is)."""
        hashed = self._hashed.get(model_id)
        if hashed is not None:
            await hashed.wait()


class HashProgress:
    """Overall progress of one scan or verify across all the files it hashes."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.finished = 0

    def event(self, model_id: str, done: int, total: int) -> ModelEvent:
        overall = min(self.finished + done, max(self.total_bytes, self.finished + total))
        return ModelEvent(
            "progress",
            model_id,
            "hashing",
            bytes_done=done,
            bytes_total=total,
            total_done=overall,
            total_bytes=max(self.total_bytes, self.finished + total),
        )

    def finish_file(self, size: int) -> None:
        self.finished += size
