"""The Load settings panel under a Max context, on the real MainWindow over a real Core with
the demo model (trained for 8,192 tokens): a model saved at 8,192 runs with the cap, and the
panel says the cap and where it comes from, the window's `--max-context` flag of this run
(which Settings cannot move, and which is never saved) or Max context in Settings. It said
"8,192 tokens" in the Context box and "2,048 tokens per request" under it, and nothing why."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.models.memory import ModelSettings
from tests.integration.gui_windows import MODEL, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def runs_with(window: Any, model_id: str) -> str:
    """What Runs with says for `model_id`, selected on the Models page."""
    window.nav.setCurrentRow(1)
    table = window.models.model
    await until(lambda: any(table.model_id(r) == model_id for r in range(table.rowCount())))
    row = next(r for r in range(table.rowCount()) if table.model_id(r) == model_id)
    panel = window.models.memory
    window.models.table.selectRow(row)
    await until(lambda: panel.model_id == model_id and panel.last_plan is not None, 30)
    return str(panel.runs_with.text())


async def test_the_panel_says_the_cap_and_that_the_flag_set_it(qtbot: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    async with open_app(qtbot, data, max_context=2048) as (core, window):
        await core.save_model_settings(MODEL, ModelSettings(context_length=8192))
        shown = await runs_with(window, MODEL)
        assert window.models.memory.context.value() == 8192  # what was saved
        assert shown.startswith("2,048 tokens per request (trained 8,192)"), shown
        assert "this run was started with `--max-context 2048`, which caps every model" in shown
        assert "Max context in Settings does not apply while it is given" in shown, shown
        assert "the 8,192 saved here applies in a run without it" in shown, shown


async def test_the_panel_says_a_cap_from_settings(qtbot: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    async with open_app(qtbot, data) as (core, window):
        await core.save_settings(dataclasses.replace(core.stored_settings, max_context=2048))
        await core.save_model_settings(MODEL, ModelSettings(context_length=8192))
        shown = await runs_with(window, MODEL)
        assert shown.startswith("2,048 tokens per request (trained 8,192)"), shown
        assert "At most 2,048 tokens: Max context in Settings caps every model." in shown
        assert "--max-context" not in shown, shown
        # Without a cap holding it, nothing is said about one.
        await core.save_model_settings(MODEL, ModelSettings(context_length=2048))
        panel = window.models.memory
        window.models.table.clearSelection()
        await until(lambda: panel.model_id is None, what="nothing selected")
        panel.last_plan = None  # the next estimate shown is the new setting's
        shown = await runs_with(window, MODEL)
        assert shown.startswith("2,048 tokens per request") and "At most" not in shown, shown
