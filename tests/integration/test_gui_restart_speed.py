"""The Speed of a task the recovery ended at launch (after a restart), in the real
MainWindow over a real core: its run's speed from what is stored, the output tokens over
the time to its last event before the stop, and "—" only for a run that wrote nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.task_table import COL_DURATION, COL_TPS
from tests.integration.gui_windows import open_app
from tests.integration.test_gui_task_endings import cell, leave_killed_runs
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_a_task_ended_by_the_restart_shows_the_speed_of_its_run(
    qtbot: Any, tmp_path: Path
) -> None:
    """A run killed 100 s before the restart had written 3 tokens 2 s after its start: its
    Speed is 1.5 tok/s (it said "—", as if nothing could be known), never 3 tokens over the
    100 s to the restart; one that wrote nothing has no speed, and the tooltips say why."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    wrote, silent = await leave_killed_runs(data_dir)
    async with open_app(qtbot, data_dir, engine=FakeEngine()) as (core, window):
        assert (await core.task(wrote))["state"] == "failed"  # ended by the recovery
        await until(lambda: cell(window, wrote, COL_TPS) is not None, what="the rows")
        assert cell(window, wrote, COL_DURATION) == "2.0 s"
        assert cell(window, wrote, COL_TPS) == "1.5 tok/s"
        tip = cell(window, wrote, COL_TPS, Qt.ItemDataRole.ToolTipRole)
        assert "3 tokens until its last event before the stop" in tip, tip
        assert cell(window, silent, COL_TPS) == "—"
        tip = cell(window, silent, COL_TPS, Qt.ItemDataRole.ToolTipRole)
        assert "no speed" in tip, tip
