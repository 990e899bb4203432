"""A task shown by id before its row is listed (a prompt just sent, Show in Tasks) stays in
the details pane when its row arrives and is selected: selecting the row cleared the
selection first, and the pane showed nothing between the two (its text gone, the task read
again)."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.pages.tasks_page import TasksPage
from tests.support.polling import until
from tests.unit.gui.helpers import make_task

pytestmark = pytest.mark.gui


async def test_the_pane_keeps_a_wanted_task_while_its_arriving_row_is_selected(
    qtbot: Any, core: Any, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    bridge = CoreBridge(core, interval_ms=3_600_000)  # flushed by the test
    page = TasksPage(core, url="http://127.0.0.1:5677")
    qtbot.addWidget(page)
    bridge.tasks_changed.connect(page.on_changes)
    await page.load()
    page.show()
    shown: list[str | None] = []
    display = page.details.display

    def displayed(task_id: str | None) -> Any:
        shown.append(task_id)
        return display(task_id)

    monkeypatch.setattr(page.details, "display", displayed)
    task_id = await make_task(store)
    page.show_task(task_id)  # not listed yet: shown now, selected when its row arrives
    assert page.details.task_id == task_id
    bridge.flush()
    await until(lambda: page.selected_ids() == [task_id], what=page.selected_ids)
    assert page.details.task_id == task_id
    assert None not in shown, shown
    bridge.close()
