"""A download waiting for the hub holds no thread: the service's other work that runs in
threads (a create's tokenizer call, a memory plan: asyncio.to_thread) goes on meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from lmsp_desktop.core.downloads.fetch import Stopped, Transfer
from lmsp_desktop.core.downloads.manager import _sleep_unless_stopped


async def test_downloads_waiting_for_the_hub_leave_the_threads_to_other_work() -> None:
    # More waits than the default executor has threads (min(32, cores + 4)).
    transfers = [Transfer() for _ in range(40)]
    waits = [asyncio.create_task(_sleep_unless_stopped(t, 60.0)) for t in transfers]
    await asyncio.sleep(0.05)  # every wait has begun
    # A tokenizer call's hop to a thread is answered, not queued behind the waits (the 10 s
    # bound only turns a hang into a failure).
    assert await asyncio.wait_for(asyncio.to_thread(lambda: "counted"), 10) == "counted"
    for transfer in transfers:  # a cancel of each ends its wait
        transfer.stop.set()
    for wait in waits:
        with pytest.raises(Stopped):
            await asyncio.wait_for(wait, 10)


async def test_a_wait_nobody_stops_ends_after_its_delay() -> None:
    await asyncio.wait_for(_sleep_unless_stopped(Transfer(), 0.05), 10)
