"""A client's background task, seen and cancelled in the real window over the real service."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.core.storage.clients import create_client
from lmsp_desktop.gui.models.task_table import COL_CLIENT, COL_STATE
from tests.support.polling import until

pytestmark = pytest.mark.gui

MODEL = "smollm2-135m-instruct"
# Long enough to still be generating when the test clicks Cancel, yet bounded: the demo model
# sometimes loops, and a cancel that comes too late must not cost minutes.
BUDGET = 160


async def test_http_task_streams_into_the_window_and_cancel_button_stops_it(
    gui_app: tuple[Any, Any],
) -> None:
    core, window = gui_app
    client, token = await create_client(
        core.store.db, "story-bot", frozenset({"responses:read", "responses:write"})
    )
    headers = {"Authorization": f"Bearer {token}"}
    body = {
        "model": MODEL,
        "input": "Write a very long story about a dragon who learns to bake bread.",
        "background": True,
        "max_output_tokens": BUDGET,
        "temperature": 0,
    }
    async with (
        aiohttp.ClientSession(core.url) as http,
        http.post("/v1/responses", json=body, headers=headers) as answer,
    ):
        created = await answer.json()
        assert answer.status == 202, created
    task_id = created["id"]
    tasks = window.tasks

    # Its row appears in the table, with the client's name.
    await until(lambda: tasks.model.row_of(task_id) is not None, what="the task's row")
    row = tasks.model.row_of(task_id)
    assert tasks.model.index(row, COL_CLIENT).data() == "story-bot"

    # Selecting it shows its events and output growing while it runs.
    tasks.table.selectRow(row)
    details = tasks.details
    await until(lambda: details.task_id == task_id, what="details of the selected task")
    details.tabs.setCurrentIndex(1)  # Events
    events = details.events

    def shown_state() -> str:
        r = tasks.model.row_of(task_id)
        return "" if r is None else str(tasks.model.index(r, COL_STATE).data())

    await until(lambda: shown_state() == "running", what=shown_state)
    await until(lambda: events.rowCount() >= 8, what=lambda: f"{events.rowCount()} event rows")
    rows_before, text_before = events.rowCount(), details.output.toPlainText()
    await until(
        lambda: (
            events.rowCount() > rows_before + 3
            and len(details.output.toPlainText()) > len(text_before)
        ),
        what="more events and more output text",
    )
    assert details.output.toPlainText().startswith(text_before.rstrip("▌"))
    assert events.index(events.rowCount() - 1, 2).data() == "response.output_text.delta"
    assert details.cancel_button.isEnabled() and tasks.cancel_button.isEnabled()

    details.cancel_button.click()

    await until(lambda: shown_state() == "cancelled", what=shown_state)
    assert not details.cancel_button.isEnabled()
    assert not tasks.cancel_button.isEnabled()
    stored = await core.store.tasks.events(task_id, 0, 100_000)
    types = [e["type"] for e in stored]
    terminal = [t for t in types if t.removeprefix("response.") in TERMINAL]
    assert terminal == ["response.cancelled"], types
    assert "response.cancelling" in types
    # The events view caught up with the store, down to the terminal event.
    await until(lambda: events.rowCount() == len(stored), what="all events in the view")
    assert events.index(events.rowCount() - 1, 2).data() == "response.cancelled"
    assert client["id"]
