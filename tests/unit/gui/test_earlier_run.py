"""The earlier run's text of a retried task is read from its events once, even when the
selection and a refresh ask for it at the same time (gui/pages/earlier_run.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from lmsp_desktop.core.states import EventType
from lmsp_desktop.gui.pages.earlier_run import PAGE, EarlierRuns


class EventLog:
    """A task's events: one run of words, a start-over, a second run; counts rows read."""

    def __init__(self, words: int) -> None:
        deltas = [(EventType.OUTPUT_TEXT_DELTA, {"delta": f" w{i}"}) for i in range(words)]
        events = [(EventType.QUEUED, {}), *deltas, (EventType.QUEUED, {}), deltas[0]]
        self.rows: list[dict[str, Any]] = [
            {"seq": seq, "type": kind, "data": json.dumps(data)}
            for seq, (kind, data) in enumerate(events, start=1)
        ]
        self.read = 0

    async def task_event_rows(self, task_id: str, after: int, limit: int) -> list[Any]:
        await asyncio.sleep(0)  # a store read: other coroutines run meanwhile
        rows = [row for row in self.rows if row["seq"] > after][:limit]
        self.read += len(rows)
        return rows


async def test_two_asking_at_once_read_each_event_once_and_get_the_same_text() -> None:
    log = EventLog(words=PAGE * 2)
    earlier = EarlierRuns(log)  # type: ignore[arg-type]
    texts = await asyncio.gather(earlier.text("t1", 1), earlier.text("t1", 1))
    expected = "".join(f" w{i}" for i in range(PAGE * 2))
    assert list(texts) == [expected, expected]
    assert log.read == len(log.rows)
    assert await earlier.text("t1", 1) == expected
    assert log.read == len(log.rows)  # asked again: nothing read
