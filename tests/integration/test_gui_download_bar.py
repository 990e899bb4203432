"""A running download's Output cell keeps its text readable over the bar (the nineteenth walk:
Qt's bar filled the done part with the selection's colour and turned the text white inside
it, "42.2 MiB / 93.8 MiB, wai|ting for the hub", like a selected cell). Real MainWindow over
a real core and a real (fake) hub on loopback; the pixels as painted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QPalette

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.task_table import COL_TOKENS, Role
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import TINY_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


async def test_the_download_bar_is_a_light_fill_under_text_in_the_text_colour(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        window.resize(1200, 780)
        hub.server.bytes_per_s = 128 * 1024  # ~24 s for its 3 MiB: running while looked at
        task_id = await core.pull_model(TINY_REPO, "tiny-Q8_0.gguf")
        tasks = window.tasks
        model = tasks.model

        def fraction() -> float:
            row = model.row_of(task_id)
            return 0.0 if row is None else model.index(row, COL_TOKENS).data(Role.PROGRESS) or 0.0

        await until(lambda: fraction() > 0.25, 30, fraction)
        tasks.window().grab().save(str(tmp_path / "download-bar.png"))
        tasks.show_task(task_id)  # selected: the row's highlight round the cell
        await until(lambda: tasks.selected_ids() == [task_id], what=tasks.selected_ids)
        done = fraction()
        table = tasks.table
        row = model.row_of(task_id)
        assert row is not None
        rect = table.visualRect(model.index(row, COL_TOKENS))
        image = table.viewport().grab().toImage()
        highlight = table.palette().color(QPalette.ColorRole.Highlight)
        fill_end = rect.left() + 2 + int((rect.width() - 4) * done) - 2
        # The done part, near its left end and top (clear of the text): a tint, lighter than
        # the selection's highlight, not the highlight itself.
        fill = image.pixelColor(rect.left() + 5, rect.top() + 5)
        assert fill != highlight, fill.name()
        assert fill.lightness() > highlight.lightness() + 30, (fill.name(), highlight.name())
        # The text over the done part in the text colour (dark here), not turned white.
        text = table.palette().color(QPalette.ColorRole.Text)
        darkest = min(
            image.pixelColor(x, y).lightness()
            for x in range(rect.left() + 6, fill_end)
            for y in range(rect.top() + 4, rect.bottom() - 6)
        )
        assert abs(darkest - text.lightness()) < 60, (darkest, text.name())
        tasks.window().grab().save(str(tmp_path / "download-bar-selected.png"))
        await core.cancel(task_id)
