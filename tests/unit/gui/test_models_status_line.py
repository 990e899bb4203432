"""The line under the Models table follows the selected model and does not linger: "X is
loaded." went on after X's engine was killed (the row said "✗ crashed"), stayed when another
model was selected, and "Rescanned: the list shows what changed." stayed for minutes."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from lmsp_desktop.core.crashes import CrashRecord
from lmsp_desktop.core.engines.base import EngineCrashed
from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.models.model_table import COL_LOADED
from lmsp_desktop.gui.pages import models_page
from lmsp_desktop.gui.pages.models_page import ModelsPage
from tests.support.gui_core import fake_model
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def open_page(qtbot: Any, core: Any) -> AsyncIterator[ModelsPage]:
    core.models_list = [fake_model("alpha"), fake_model("beta")]
    bridge = CoreBridge(core, interval_ms=20)
    shown = ModelsPage(core)
    qtbot.addWidget(shown)
    shown.show()
    shown.connect_bridge(bridge)
    await shown.load()
    yield shown
    bridge.close()


@pytest.fixture
async def page(qtbot: Any, core: Any) -> AsyncIterator[ModelsPage]:
    async for shown in open_page(qtbot, core):
        yield shown


@pytest.fixture
async def quick_page(
    qtbot: Any, core: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ModelsPage]:
    """The page with "a few seconds" shortened to 50 ms."""
    monkeypatch.setattr(models_page, "SAID_FOR_MS", 50, raising=False)
    async for shown in open_page(qtbot, core):
        yield shown


def click_row(page: ModelsPage, model_id: str) -> None:
    row = page.model.row_of(model_id)
    assert row is not None
    rect = page.table.visualRect(page.model.index(row, 0))
    QTest.mouseClick(page.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


async def test_a_loaded_line_follows_the_models_crash(page: ModelsPage, core: Any) -> None:
    click_row(page, "alpha")
    page.load_button.click()
    await until(lambda: page.status.text() == "alpha is loaded.", what=page.status.text)
    core.announce_loaded("alpha", "loaded")  # the runner's news of it
    await until(lambda: "loaded" in str(page.model.index(0, COL_LOADED).data()))
    core.crashes["alpha"] = CrashRecord(
        "alpha", "SIGKILL", time.time(), EngineCrashed("alpha", "SIGKILL"), {"failed": 1}
    )
    core.announce_loaded("alpha", "unloaded")  # kill -9 of its engine
    await until(lambda: "SIGKILL" in page.status.text(), what=page.status.text)
    assert "is loaded" not in page.status.text()
    assert page.status.text().startswith("The engine process of alpha ended with SIGKILL")
    assert page.load_button.text() == "Load again"


async def test_the_line_goes_with_the_model_it_speaks_of(page: ModelsPage, core: Any) -> None:
    click_row(page, "alpha")
    page.load_button.click()
    await until(lambda: page.status.text() == "alpha is loaded.", what=page.status.text)
    click_row(page, "beta")
    assert page.status.text() == ""  # not beta's
    click_row(page, "alpha")
    assert page.status.text() == ""  # an outcome already read is not said again


async def test_a_rescans_answer_clears_after_a_few_seconds(quick_page: ModelsPage) -> None:
    await quick_page.rescan()
    assert quick_page.status.text() == "Rescanned: nothing changed."
    await until(lambda: quick_page.status.text() == "", what=quick_page.status.text)


async def test_a_rescans_answer_stays_over_a_reload_and_goes_at_the_next_click(
    page: ModelsPage, core: Any
) -> None:
    await page.rescan()
    core.models_list = [*core.models_list, fake_model("gamma")]
    core.announce_models()  # the table is read again (rows replaced): the line stays
    await until(lambda: page.model.rowCount() == 3, what="gamma listed")
    assert page.status.text() == "Rescanned: nothing changed."
    click_row(page, "gamma")  # the next action
    assert page.status.text() == ""
