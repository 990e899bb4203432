"""The Models page as a first-time user walked it (Xvfb, 1200×780): Load and Unload of the
selected model from the window (before, only `lmsp-desktop models unload` or 10 minutes idle
applied saved Load settings), on the real MainWindow over a real core and the real demo
model's llama.cpp engine."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.gui.models.model_table import COL_LOADED
from tests.support.polling import until

pytestmark = pytest.mark.gui

MODEL = "smollm2-135m-instruct"


def loaded_cell(window: Any) -> str:
    table = window.models.model
    row = table.row_of(MODEL)
    return "" if row is None else str(table.index(row, COL_LOADED).data())


async def test_load_then_unload_the_selected_model_from_the_models_page(
    qtbot: Any, gui_app: tuple[Any, Any]
) -> None:
    core, window = gui_app
    window.nav.setCurrentRow(1)
    page = window.models
    await until(lambda: page.model.row_of(MODEL) is not None, what="the demo model listed")
    button = page.load_button
    assert button.isVisible() and not button.isEnabled()  # nothing selected yet
    page.table.selectRow(page.model.row_of(MODEL))
    await until(lambda: button.isEnabled(), 60, lambda: button.toolTip())
    assert button.text() == "Load"

    # A double-click loads it once: the button says what is under way and waits.
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert button.text() == "Loading…" and not button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert page.status.text() == f"Loading {MODEL}…"
    await until(lambda: page.status.text() == f"{MODEL} is loaded.", 120, page.status.text)
    assert core.model_loaded_state(MODEL) == "loaded"
    pid = core.runner.engine_pid(MODEL)
    assert pid is not None
    await until(lambda: loaded_cell(window).startswith("loaded"), 30, lambda: loaded_cell(window))
    assert button.text() == "Unload" and button.isEnabled()

    # Save while loaded points at the button that applies the settings now.
    panel = page.memory
    await until(lambda: panel.isEnabled() and panel.last_plan is not None, 30, "the estimate")
    panel.context.setValue(2048)
    panel.save_button.click()
    await until(lambda: panel.saved.text().startswith("Saved."), what=panel.saved.text)
    assert "Unload, then Load" in panel.saved.text()

    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert button.text() == "Unloading…" and not button.isEnabled()
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    await until(lambda: "is unloaded" in page.status.text(), 60, page.status.text)
    assert core.model_loaded_state(MODEL) == "unloaded"
    assert core.runner.engine_pid(MODEL) is None
    await until(lambda: loaded_cell(window) == "", 30, lambda: loaded_cell(window))
    assert button.text() == "Load" and button.isEnabled()

    # Load again: the saved settings apply now.
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    await until(lambda: page.status.text() == f"{MODEL} is loaded.", 120, page.status.text)
    assert core.runner.engine_pid(MODEL) not in (None, pid)
