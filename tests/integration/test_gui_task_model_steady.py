"""The Tasks table's Model cell holds still while a long download's time left grows
(walkH19: as Duration widened to "30 min 29 s left", the Model column, which takes what the
others leave, narrowed, and the model name cut in its middle visibly shrank). The growing
cell takes its room from a column whose cells can be cut (Output), or the table scrolls;
the Model cell keeps what it shows. The real MainWindow over a real core, a real download
from a (fake) hub on loopback whose speed drops mid-way."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEvent, QModelIndex, QObject
from PySide6.QtWidgets import QStyleOptionViewItem

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.task_table import COL_DURATION, COL_MODEL, COL_STATE
from tests.integration.gui_windows import open_app
from tests.support import fake_hub
from tests.support.hub_repos import DEMO_FILE, DEMO_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


def shown_text(table: Any, index: QModelIndex) -> str:
    """The cell's text as the table paints it at its column's width (cut by its delegate)."""
    option = QStyleOptionViewItem()
    option.textElideMode = table.textElideMode()
    option.fontMetrics = table.fontMetrics()
    delegate = table.itemDelegateForColumn(index.column()) or table.itemDelegate()
    delegate.initStyleOption(option, index)
    margins = table.sizeHintForIndex(index).width() - option.fontMetrics.horizontalAdvance(
        str(index.data())
    )
    room = table.horizontalHeader().sectionSize(index.column()) - margins
    return str(option.fontMetrics.elidedText(str(index.data()), option.textElideMode, room))


class Painted(QObject):
    """Calls `seen` at each paint of the object it filters."""

    def __init__(self, seen: Callable[[], None]) -> None:
        super().__init__()
        self.seen = seen

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.seen()
        return False


# Widths at which the name is cut (at 1000 px a column was also dropped mid-run); at 1100 it
# is whole since titles no longer keep room for a sort arrow they do not show.
@pytest.mark.parametrize("width", [900, 1000, 1100])
async def test_the_model_cell_holds_while_a_downloads_time_left_grows(
    qtbot: Any, tmp_path: Path, hub: Hub, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine(), include_demo=False) as (
        core,
        window,
    ):
        window.resize(width, 780)
        tasks = window.tasks
        rows, table = tasks.model, tasks.table
        hub.server.bytes_per_s = 8 * 1024 * 1024  # its 98 MB: seconds left
        # A hub name longer than the Model column gives it: cut in its middle, as in the walk.
        task_id = await core.pull_model(DEMO_REPO, DEMO_FILE)

        def cell(col: int) -> str:
            row = rows.row_of(task_id)
            return "" if row is None else str(rows.index(row, col).data())

        await until(
            lambda: re.fullmatch(r"\d+\.\d s left", cell(COL_DURATION)),  # "11.5 s left"
            what=lambda: (cell(COL_STATE), cell(COL_DURATION)),
        )
        await until(lambda: not table.horizontalScrollBar().maximum(), what="a table in view")
        row = rows.row_of(task_id)
        assert row is not None
        model_index = rows.index(row, COL_MODEL)
        seen = [shown_text(table, model_index)]
        if width < 1100:  # cut at this width (what the walk saw); at 1100 whole: it stays so
            assert "…" in seen[0], seen

        def painted() -> None:
            if cell(COL_STATE) == "running":
                seen.append(shown_text(table, model_index))

        watch = Painted(painted)
        table.viewport().installEventFilter(watch)  # what each repaint showed
        # The hub slows down to a trickle (in small chunks, felt as a speed): tens of minutes
        # left, "30 min 29 s left" as the walk saw.
        monkeypatch.setattr(fake_hub, "CHUNK", 16 * 1024)
        hub.server.bytes_per_s = 48 * 1024
        await until(
            lambda: re.match(r"\d\d min \d\d s left", cell(COL_DURATION)),
            60,
            lambda: cell(COL_DURATION),
        )
        table.viewport().removeEventFilter(watch)
        seen.append(shown_text(table, model_index))
        window.grab().save(str(tmp_path / f"tasks-{width}-minutes-left.png"))
        # The model name is shown as it was before the time left grew, every moment of it.
        assert set(seen) == {seen[0]}, seen
        # And the time left is whole (Duration is never cut): "31 min 42 s left".
        duration = rows.index(row, COL_DURATION)
        assert shown_text(table, duration) == cell(COL_DURATION)
        await core.cancel(task_id)
        await until(lambda: cell(COL_STATE) == "cancelled", what=lambda: cell(COL_STATE))
        # The run over, the table fits its width freely again (nothing to scroll).
        await until(lambda: not table.horizontalScrollBar().maximum(), what="a table in view")
