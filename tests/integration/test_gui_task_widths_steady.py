"""The Tasks table while a download runs and after (the nineteenth walk): the columns keep
their widths while a running row's text moves (Model went 268 → 281 → 226 px in one
download, as its Duration and Output texts narrowed and widened), the Model cell is cut in
its middle so its quant tag stays, and On restart keeps its title and width when the run
ends (its title is "↻" only where the room is short). The
real MainWindow over a real core, a real download from a (fake) hub on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QStyleOptionViewItem

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.task_table import COL_MODEL, COL_ON_RESTART, COL_STATE, COL_TOKENS
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import TINY_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]
SHOTS = Path("/tmp/walkF19/shots")


async def test_widths_hold_while_a_download_runs_and_the_model_keeps_its_tag(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine(), include_demo=False) as (
        core,
        window,
    ):
        window.resize(1200, 780)
        tasks = window.tasks
        rows, header = tasks.model, tasks.table.horizontalHeader()
        hub.server.bytes_per_s = 512 * 1024  # 3 MiB: "768.0 KiB / 3.0 MiB" → "1.0 MiB / …"
        task_id = await core.pull_model(TINY_REPO, "tiny-Q8_0.gguf")

        def state() -> str:
            row = rows.row_of(task_id)
            return "" if row is None else str(rows.index(row, COL_STATE).data())

        def title() -> str:
            return str(rows.headerData(COL_ON_RESTART, Qt.Orientation.Horizontal))

        await until(lambda: state() == "running", what=state)
        assert title() == "On restart"  # room for the whole title at 1200 px
        restart_width = header.sectionSize(COL_ON_RESTART)
        narrowed: list[tuple[int, int, int]] = []

        def resized(col: int, old: int, new: int) -> None:
            if state() == "running" and col != COL_MODEL and 0 < new < old:
                narrowed.append((col, old, new))

        header.sectionResized.connect(resized)
        SHOTS.mkdir(parents=True, exist_ok=True)
        await until(lambda: "MiB /" in str(rows.index(0, COL_TOKENS).data()), what=state)
        window.grab().save(str(SHOTS / "hM19-tasks-dl-running.png"))
        await until(lambda: state() == "completed", what=state, limit=60)
        header.sectionResized.disconnect(resized)
        assert narrowed == []  # no column narrowed (and Model widened back) within the run

        # Every row ended (On restart's cells all "—"): its title and width stay as they were
        # (they followed the rows: "On restart" while one ran, "↻" after, and the columns
        # jumped at each run's start and end); the title is "↻" only where room is short.
        await until(lambda: rows.index(0, COL_ON_RESTART).data() == "—")
        await until(lambda: not tasks.fitter._timer.isActive())
        assert title() == "On restart"
        assert header.sectionSize(COL_ON_RESTART) == restart_width
        for width in range(1180, 880, -20):  # narrower until its title gives way
            window.resize(width, 780)
            await until(lambda: not tasks.fitter._timer.isActive())
            if title() == "↻":
                break
        assert title() == "↻" and not header.isSectionHidden(COL_ON_RESTART), width
        whole = tasks.fontMetrics().horizontalAdvance("On restart")
        assert header.sectionSize(COL_ON_RESTART) < whole
        tip = rows.headerData(COL_ON_RESTART, Qt.Orientation.Horizontal, Qt.ToolTipRole)
        assert str(tip).startswith("On restart: What happens to the task"), tip
        window.resize(1200, 780)
        await until(lambda: title() == "On restart", what=title)

        # The Model cell cut for room keeps its end, the quant tag (three downloads of one
        # repo read alike when cut at their end).
        index = rows.index(rows.row_of(task_id) or 0, COL_MODEL)
        name = str(index.data())
        assert name.endswith(":Q8_0"), name
        table = tasks.table
        option = QStyleOptionViewItem()
        option.textElideMode = table.textElideMode()  # as the view starts each cell's option
        option.fontMetrics = table.fontMetrics()
        delegate = table.itemDelegateForColumn(COL_MODEL) or table.itemDelegate()
        delegate.initStyleOption(option, index)  # type: ignore[attr-defined]
        room = option.fontMetrics.horizontalAdvance(name) * 2 // 3
        shown = option.fontMetrics.elidedText(name, option.textElideMode, room)
        assert "…" in shown and shown.endswith("Q8_0"), shown
        window.grab().save(str(SHOTS / "hM19-tasks-dl-done.png"))
