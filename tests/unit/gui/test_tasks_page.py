"""The Tasks page with a real store: live rows, details, cancel, Delete, export, empty state."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from lmsp_desktop.core.states import TaskState
from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.models.task_table import COL_STATE
from lmsp_desktop.gui.pages.tasks_page import TasksPage
from tests.support.polling import until
from tests.unit.gui.helpers import FakeRunner, make_task, run_task

pytestmark = pytest.mark.gui

TERMINAL_EVENTS = {
    "response.completed",
    "response.failed",
    "response.incomplete",
    "response.cancelled",
}


@pytest.fixture
async def page(qtbot, core):
    bridge = CoreBridge(core, interval_ms=20)
    widget = TasksPage(core, url="http://127.0.0.1:5677")
    qtbot.addWidget(widget)
    bridge.tasks_changed.connect(widget.on_changes)
    await widget.load()
    widget.resize(1000, 700)
    widget.show()
    yield widget
    bridge.close()


def state_text(page: TasksPage, task_id: str) -> str:
    row = page.model.row_of(task_id)
    return "" if row is None else page.model.data(page.model.index(row, COL_STATE))


async def test_empty_state_then_live_rows_with_badges(page, store):
    assert page.stack.currentWidget() is page.empty
    assert "http://127.0.0.1:5677/v1" in page.empty_label.text()
    page.copy_curl()
    assert "http://127.0.0.1:5677/v1/responses" in QGuiApplication.clipboard().text()
    first = await make_task(store)
    second = await make_task(store)
    await until(lambda: page.model.rowCount() == 2, what="rows")
    assert page.stack.currentWidget() is page.splitter
    assert state_text(page, second) == "queued #2"
    await run_task(store, first, ["Hello", " there"], finish=False)
    await until(lambda: state_text(page, first) == "running")
    await until(lambda: state_text(page, second) == "queued #1", what="queue moved")


async def test_details_follow_output_and_events_live(page, store):
    task_id = await make_task(store)
    await until(lambda: page.model.rowCount() == 1)
    page.table.selectRow(0)
    await until(lambda: page.details.task_id == task_id and page.details.events.rowCount() == 1)
    await until(lambda: 'Input:\n"Hello"' in page.details.request.toPlainText(), what="request")
    await run_task(store, task_id, ["Once", " upon"], finish=False)
    await until(lambda: page.details.output.toPlainText() == "Once upon▌", what="live output")
    await store.tasks.append_deltas(
        task_id, [" a time"], output_tokens=3, input_tokens=5, snapshot=None
    )
    await until(lambda: page.details.output.toPlainText() == "Once upon a time▌")
    await store.tasks.finish(task_id, incomplete_reason=None, input_tokens=5, output_tokens=3)
    await until(lambda: page.details.output.toPlainText() == "Once upon a time")

    def event_types() -> list[str]:
        events = page.details.events
        return [events.index(r, 2).data() for r in range(events.rowCount())]

    # The events table follows on its own (paged reads): a busy machine may show the output
    # before the last event rows.
    await until(lambda: event_types()[-1:] == ["response.completed"], what=event_types)
    types = event_types()
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert types.count("response.output_text.delta") == 3
    assert "completed" in page.details.header.text()
    assert not page.details.cancel_button.isEnabled()


async def test_cancel_button_ends_cancelled_with_one_terminal_event(page, store):
    runner = FakeRunner(store)
    task_id = await make_task(store)
    await run_task(store, task_id, ["partial"], finish=False)
    await until(lambda: state_text(page, task_id) == "running")
    page.table.selectRow(0)
    await until(lambda: page.cancel_button.isEnabled())
    qtbot_click(page.cancel_button)
    await until(lambda: state_text(page, task_id) == "cancelled", what="cancelled")
    events = await store.tasks.events(task_id)
    assert [e["type"] for e in events if e["type"] in TERMINAL_EVENTS] == ["response.cancelled"]
    assert (await store.tasks.get(task_id))["output_text"] == "partial"  # output kept
    assert not page.cancel_button.isEnabled()
    del runner


async def test_row_shows_cancelling_until_the_engine_confirms(page, store):
    task_id = await make_task(store)
    await run_task(store, task_id, ["x"], finish=False)
    await until(lambda: page.model.rowCount() == 1)
    page.table.selectRow(0)
    await until(lambda: page.details.cancel_button.isEnabled())
    qtbot_click(page.details.cancel_button)
    await until(lambda: state_text(page, task_id) == "cancelling…")
    assert (await store.tasks.get(task_id))["state"] == TaskState.CANCELLING
    await store.tasks.confirm_cancelled(task_id)
    await until(lambda: state_text(page, task_id) == "cancelled")


async def test_delete_key_cancels_the_selection_after_confirmation(page, store):
    ids = [await make_task(store) for _ in range(3)]
    await until(lambda: page.model.rowCount() == 3)
    page.table.selectAll()
    page.table.setFocus()
    page.confirm_cancel()
    assert page.confirm_box is not None and page.confirm_box.isVisible()
    assert "Cancel 3 tasks?" in page.confirm_box.text()
    page.confirm_box.buttons()[0].click()  # "Cancel tasks"
    for task_id in ids:
        await until(lambda t=task_id: state_text(page, t) == "cancelled")


async def test_state_chip_and_text_filter(page, store):
    done = await make_task(store, model="gemma")
    await run_task(store, done, ["y"])
    await make_task(store, model="smollm2")
    await until(lambda: page.model.rowCount() == 2)
    page.chips.button(4).click()  # Finished
    await until(lambda: page.model.rowCount() == 1)
    assert page.model.task(done) is not None
    page.chips.button(0).click()
    page.search.setText("smol")
    await until(lambda: page.model.rowCount() == 1 and page.model.task(done) is None)


async def test_export_events_as_json_lines(page, store, tmp_path):
    task_id = await make_task(store)
    await run_task(store, task_id, ["a", "b"])
    await until(lambda: page.model.rowCount() == 1)
    page.table.selectRow(0)
    await until(lambda: page.details.task_id == task_id)
    out = tmp_path / "events.jsonl"
    assert await page.details.export(out) == 10
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == await store.tasks.events(task_id)
    assert [e["sequence_number"] for e in lines] == list(range(1, 11))
    assert lines[-1]["type"] == "response.completed"


def qtbot_click(button) -> None:
    from PySide6.QtTest import QTest

    QTest.mouseClick(button, Qt.MouseButton.LeftButton)


async def test_state_badge_stays_visible_on_the_selected_row(page, store):
    task_id = await make_task(store)
    await run_task(store, task_id, ["x"], finish=False)
    await until(lambda: state_text(page, task_id) == "running")
    page.table.selectRow(0)
    page.table.setFocus()
    await until(lambda: page.selected_ids() == [task_id])
    rect = page.table.visualRect(page.model.index(0, COL_STATE))
    image = page.table.viewport().grab(rect).toImage()
    highlight = page.table.palette().color(page.table.palette().ColorRole.Highlight)
    badge = image.copy(0, 0, 20, image.height())  # the decoration, left of the word

    def far_from_highlight(x: int, y: int) -> bool:
        c = badge.pixelColor(x, y)
        diff = abs(c.red() - highlight.red()) + abs(c.green() - highlight.green())
        return diff + abs(c.blue() - highlight.blue()) > 150

    contrasting = sum(
        far_from_highlight(x, y) for x in range(badge.width()) for y in range(badge.height())
    )
    # The badge (its ring and its glyph) stands out from the selection colour.
    assert contrasting >= 20, contrasting
