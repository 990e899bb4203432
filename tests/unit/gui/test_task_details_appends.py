"""The details pane follows a generating task by appending the text deltas that arrive, read
from the window's bridge flushes (or as events when a flush kept only its last commit's), not
by re-reading the whole task for every flush of a few tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lmsp_desktop.core.storage.tasks import NewTask
from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.pages.task_details import CURSOR, TaskDetails
from tests.support.polling import until
from tests.unit.gui.helpers import make_task

pytestmark = pytest.mark.gui


@pytest.fixture
async def details(qtbot: Any, core: Any) -> Any:
    widget = TaskDetails(core)
    qtbot.addWidget(widget)
    widget.resize(900, 300)
    widget.show()
    return widget


@pytest.fixture
def bridge(core: Any, details: TaskDetails) -> Any:
    """The window's bridge, flushed by the test only (its timer never comes due)."""
    made = CoreBridge(core, interval_ms=3_600_000)
    made.tasks_changed.connect(details.on_changes)
    yield made
    made.close()


@pytest.fixture
def task_reads(core: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of a whole task through the window's core."""
    reads: list[str] = []
    read = core.task

    async def counted(task_id: str) -> Any:
        reads.append(task_id)
        return await read(task_id)

    monkeypatch.setattr(core, "task", counted)
    return reads


async def shows(details: TaskDetails, text: str) -> None:
    await until(
        lambda: details.output.toPlainText() == text,
        what=lambda: f"{details.output.toPlainText()!r}, not {text!r}",
    )


async def test_a_streaming_task_is_appended_to_not_reread_per_flush(
    details: TaskDetails, bridge: CoreBridge, store: Any, task_reads: list[str]
) -> None:
    task_id = await make_task(store)
    await store.tasks.mark_running(task_id)
    bridge.flush()  # its start, heard before it is shown
    await details.show_task(task_id)
    assert details.state == "running"
    reads_running = len(task_reads)
    words: list[str] = []
    for flush in range(40):
        # Every fifth flush carries two commits: the bridge keeps only the last one's
        # events, so the first one's deltas are read as events.
        for commit in range(2 if flush % 5 == 4 else 1):
            new = [f" w{flush}.{commit}.{i}" for i in range(3)]
            words += new
            await store.tasks.append_deltas(
                task_id, new, output_tokens=len(words), input_tokens=5, snapshot=None
            )
        bridge.flush()
        await shows(details, "".join(words) + CURSOR)
    # The text grew over 40 flushes without one more read of the task.
    assert len(task_reads) == reads_running, task_reads
    await store.tasks.finish(
        task_id, incomplete_reason=None, input_tokens=5, output_tokens=len(words)
    )
    bridge.flush()
    await shows(details, (await store.tasks.get(task_id))["output_text"])
    assert details.state == "completed"
    assert len(task_reads) == reads_running + 1  # the end: a state, read once


async def test_text_appended_after_a_read_that_already_had_it_is_not_doubled(
    details: TaskDetails, bridge: CoreBridge, store: Any
) -> None:
    """A flush heard after a read that already included its deltas (the read raced the
    flush) appends nothing twice."""
    task_id = await make_task(store)
    await store.tasks.mark_running(task_id)
    await details.show_task(task_id)
    await store.tasks.append_deltas(
        task_id, [" one", " two"], output_tokens=2, input_tokens=5, snapshot=None
    )
    await details.refresh()  # the read sees both deltas before the flush tells of them
    bridge.flush()
    await store.tasks.append_deltas(
        task_id, [" three"], output_tokens=3, input_tokens=5, snapshot=None
    )
    bridge.flush()
    await shows(details, " one two three" + CURSOR)


async def test_structured_output_streams_then_shows_indented(
    details: TaskDetails, bridge: CoreBridge, store: Any
) -> None:
    """Structured output appended to is indented as soon as it parses, as a read shows it."""
    request = {"input": "A point", "text_format": {"type": "json_object"}}
    task_id = (await store.tasks.create(NewTask(model="smollm2", request=request))).task_id
    await store.tasks.mark_running(task_id)
    await details.show_task(task_id)
    pieces = ['{"x"', ": 1", ', "y": 2', "}"]
    for n, piece in enumerate(pieces, 1):
        await store.tasks.append_deltas(
            task_id, [piece], output_tokens=n, input_tokens=5, snapshot=None
        )
        bridge.flush()
        shown = "".join(pieces[:n])
        if n == len(pieces):  # whole, it parses: indented while still generating
            shown = json.dumps({"x": 1, "y": 2}, indent=2)
        await shows(details, shown + CURSOR)
    await store.tasks.finish(task_id, incomplete_reason=None, input_tokens=5, output_tokens=4)
    bridge.flush()
    await shows(details, json.dumps({"x": 1, "y": 2}, indent=2))


async def test_events_tab_shown_after_streaming_behind_output_has_every_event(
    details: TaskDetails, bridge: CoreBridge, store: Any
) -> None:
    """The Events tab reads the deltas that arrived while the Output tab was in front once
    it is shown, and follows them while shown."""
    task_id = await make_task(store)
    await store.tasks.mark_running(task_id)
    bridge.flush()
    await details.show_task(task_id)
    for n in range(10):
        await store.tasks.append_deltas(
            task_id, [f" a{n}"], output_tokens=n + 1, input_tokens=5, snapshot=None
        )
        bridge.flush()
    await shows(details, "".join(f" a{n}" for n in range(10)) + CURSOR)
    details.tabs.setCurrentWidget(details.events_tab)
    stored = await store.tasks.events(task_id, 0, 1000)
    await until(lambda: details.events.last_seq == stored[-1]["sequence_number"])
    assert details.events.rowCount() == len(stored)
    await store.tasks.append_deltas(
        task_id, [" b"], output_tokens=11, input_tokens=5, snapshot=None
    )
    bridge.flush()
    await until(lambda: details.events.rowCount() == len(stored) + 1)
    assert details.events.index(len(stored), 2).data() == "response.output_text.delta"


async def test_a_selection_in_the_output_stays_while_text_is_appended(
    details: TaskDetails, bridge: CoreBridge, store: Any
) -> None:
    from PySide6.QtGui import QTextCursor

    task_id = await make_task(store)
    await store.tasks.mark_running(task_id)
    bridge.flush()
    await details.show_task(task_id)
    await store.tasks.append_deltas(
        task_id, [" keep", " this"], output_tokens=2, input_tokens=5, snapshot=None
    )
    bridge.flush()
    await shows(details, " keep this" + CURSOR)
    cursor = details.output.textCursor()
    cursor.setPosition(1)
    cursor.setPosition(5, QTextCursor.MoveMode.KeepAnchor)
    details.output.setTextCursor(cursor)  # the reader selects "keep" to copy it
    for n in range(5):
        await store.tasks.append_deltas(
            task_id, [f" more{n}"], output_tokens=3 + n, input_tokens=5, snapshot=None
        )
        bridge.flush()
    await shows(details, " keep this" + "".join(f" more{n}" for n in range(5)) + CURSOR)
    assert details.output.textCursor().selectedText() == "keep"


async def test_events_tab_catches_up_on_many_pages_of_deltas_to_its_last_row(
    details: TaskDetails, bridge: CoreBridge, store: Any
) -> None:
    """More deltas than a page arrived behind the Output tab: shown, the Events tab reads
    them page after page down to the newest, and shows its last row."""
    task_id = await make_task(store)
    await store.tasks.mark_running(task_id)
    bridge.flush()
    await details.show_task(task_id)
    for n in range(12):
        words = [f" w{n}.{i}" for i in range(100)]
        await store.tasks.append_deltas(
            task_id, words, output_tokens=100 * (n + 1), input_tokens=5, snapshot=None
        )
        bridge.flush()
    await until(lambda: details.output.toPlainText().endswith(" w11.99" + CURSOR))
    assert details.events.rowCount() < 1200  # not followed while hidden
    details.tabs.setCurrentWidget(details.events_tab)
    total = len(await store.tasks.events(task_id, 0, 10_000))
    await until(
        lambda: details.events.rowCount() == total,
        what=lambda: f"{details.events.rowCount()} of {total}",
    )
    view = details.events_view
    last = details.events.index(total - 1, 0)

    def last_row_visible() -> bool:
        rect = view.visualRect(last)
        return rect.isValid() and view.viewport().rect().contains(rect)

    await until(last_row_visible, limit=5, what="the newest event in view")
