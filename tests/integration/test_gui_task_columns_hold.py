"""The Tasks table as the twenty-first walk saw it, in the real window over a real core:
- the Id column mixed three forms at some widths (at 1121 px: one whole, one cut by Qt
  itself from the left "…p_01a23ee954…", the rest "resp_…a23ef…"): each Id cell is now the
  whole id or the project's cut (prefix, "…", its end), never Qt's own elision;
- "cancellin…" while a task cancelled, and State, Duration and Speed growing ~22 px into
  the Model as the first run went from loading to running: they are as wide as their
  widest form from the first row, so nothing moves as runs start, cancel and end.
What Qt paints is judged as Qt's style decides it (QCommonStyle's viewItemDrawText cuts a
cell's text when its laid-out width exceeds the text rectangle less its margins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEvent, QModelIndex, QObject, Qt
from PySide6.QtGui import QTextLayout, QTextOption
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox, QStyle, QStyleOptionViewItem

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.gui.models.task_table import COL_ID, COL_STATE, COL_TPS
from lmsp_desktop.gui.pages.task_table_view import IdCut, TaskTableView
from tests.integration.gui_windows import MODEL, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


def painted(table: TaskTableView, index: QModelIndex, text: str | None = None) -> Any:
    """The option the table paints the cell with (its delegate's text, cut for room), or
    with `text` in its place."""
    option = QStyleOptionViewItem()
    table.initViewItemOption(option)
    option.rect = table.visualRect(index)
    delegate = table.itemDelegateForIndex(index)
    if isinstance(delegate, IdCut):  # as its paint() does: the room is the cell's
        delegate._room = option.rect.width()
    try:
        delegate.initStyleOption(option, index)
    finally:
        if isinstance(delegate, IdCut):
            delegate._room = 0
    if text is not None:
        option.text = text
    return option


def qt_cuts(table: TaskTableView, option: Any) -> bool:
    """Whether Qt's style cuts the option's text itself (its "…" where it chooses)."""
    style = table.style()
    margin = style.pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1
    rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, option, table)
    room = rect.adjusted(margin, 0, -margin, 0).width()
    layout = QTextLayout(option.text, option.font)
    layout.setTextOption(QTextOption(Qt.AlignmentFlag.AlignLeft))
    wrap = QTextOption()
    wrap.setWrapMode(QTextOption.WrapMode.ManualWrap)
    layout.setTextOption(wrap)
    layout.beginLayout()
    line = layout.createLine()
    line.setLineWidth(room)
    layout.endLayout()
    return bool(line.naturalTextWidth() > room)


def id_form(task_id: str, shown: str) -> str:
    """ "whole", "cut" (prefix, "…", its end) or what else it is."""
    if shown == task_id:
        return "whole"
    prefix = task_id[: task_id.index("_") + 1]
    end = shown.removeprefix(f"{prefix}…")
    if shown.startswith(f"{prefix}…") and len(end) >= 4 and task_id.endswith(end):
        return "cut"
    return f"other: {shown}"


async def settle(window: Any) -> None:
    fitter = window.tasks.fitter
    await until(lambda: not fitter._timer.isActive(), what="the fit done")
    for _ in range(3):
        QApplication.sendPostedEvents()
        await until(lambda: True)


async def test_each_id_is_whole_or_cut_its_way_at_every_width(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        tasks = window.tasks
        table, rows = tasks.table, tasks.model
        ids = [await core.submit(MODEL, f"story {i}") for i in range(8)]

        async def all_ended() -> bool:
            states = [(await core.task(i))["state"] for i in ids]
            return all(s in TERMINAL for s in states)

        await until(all_ended, what="the tasks ended")
        await until(lambda: rows.rowCount() == len(ids), what="the rows")
        seen: dict[int, list[str]] = {}
        for width in range(1000, 1401, 7):
            window.resize(width, 780)
            await settle(window)
            forms = []
            for row in range(rows.rowCount()):
                index = rows.index(row, COL_ID)
                option = painted(table, index)
                form = id_form(str(index.data()), option.text)
                if qt_cuts(table, option):
                    form = f"cut by Qt: {option.text}"
                forms.append(form)
            seen[width] = forms
        wrong = {w: f for w, f in seen.items() if set(f) - {"whole", "cut"}}
        assert wrong == {}, wrong
        # Whole or cut alike: never some whole beside others cut (ids are as long).
        mixed = {w: f for w, f in seen.items() if len(set(f)) > 1}
        assert mixed == {}, mixed
        assert {"whole", "cut"} <= {f for forms in seen.values() for f in forms}


def frame(table: TaskTableView) -> dict[str, Any]:
    """What a paint of the table showed: where each column starts and how wide it is, and
    its State cells as painted (their text; cut by Qt or not; whether "cancelling…" and
    "incomplete" would be), and its speeds."""
    header, model = table.horizontalHeader(), table.model()
    states = []
    for row in range(model.rowCount()):
        index = model.index(row, COL_STATE)
        option = painted(table, index)
        widest = [painted(table, index, word) for word in ("cancelling…", "incomplete")]
        states.append((option.text, qt_cuts(table, option), *(qt_cuts(table, o) for o in widest)))
    return {
        "edges": [
            (header.sectionViewportPosition(c), header.sectionSize(c))
            for c in range(header.count())
        ],
        "states": states,
        "speeds": [str(model.index(r, COL_TPS).data()) for r in range(model.rowCount())],
    }


class Frames(QObject):
    """Notes each frame the table paints (`frame`)."""

    def __init__(self, table: TaskTableView, seen: list[dict[str, Any]]) -> None:
        super().__init__()
        self.table, self.seen = table, seen

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint and self.table.model().rowCount():
            self.seen.append(frame(self.table))
        return False


async def test_columns_hold_from_the_first_row_as_runs_start_and_cancel(
    qtbot: Any, tmp_path: Path
) -> None:
    engine = FakeEngine([f" w{i}" for i in range(4000)], token_delay=0.02, load_delay=1.0)
    async with open_app(qtbot, tmp_path / "data", engine=engine) as (core, window):
        window.resize(1200, 780)  # the first launch's size
        tasks = window.tasks
        table, rows = tasks.table, tasks.model
        await settle(window)
        seen: list[dict[str, Any]] = []
        frames = Frames(table, seen)
        # Qt asks the filter installed last first: the fitter's again after this one, so
        # that a frame is noted as painted, after a fit the fitter does before a paint.
        table.viewport().removeEventFilter(tasks.fitter)
        table.viewport().installEventFilter(frames)
        table.viewport().installEventFilter(tasks.fitter)
        ids = [await core.submit(MODEL, f"story {i}") for i in range(3)]

        def state(task_id: str) -> str:
            row = rows.row_of(task_id)
            return "" if row is None else str(rows.index(row, COL_STATE).data())

        def speeds() -> list[str]:
            return [str(rows.index(r, COL_TPS).data()) for r in range(rows.rowCount())]

        await until(lambda: [state(i) for i in ids] == ["running"] * 3, 30, lambda: speeds())
        await until(lambda: all("tok/s" in s for s in speeds()), 30, speeds)
        # The user selects one and cancels it with the keyboard: Delete, then Enter.
        tasks.show_task(ids[0])
        table.setFocus()
        QTest.keyClick(table, Qt.Key.Key_Delete)
        box = await until(
            lambda: next(
                (
                    w
                    for w in QApplication.topLevelWidgets()
                    if isinstance(w, QMessageBox) and w.isVisible()
                ),
                None,
            ),
            what="the question",
        )
        QTest.keyClick(box, Qt.Key.Key_Return)
        await until(lambda: state(ids[0]) == "cancelled", 30, lambda: state(ids[0]))
        await settle(window)
        table.viewport().removeEventFilter(frames)
        window.grab().save(str(tmp_path / "tasks-1200-cancelled.png"))
        for task_id in ids[1:]:
            await core.cancel(task_id)

        assert seen, "no frame painted"
        assert any(s[0] == "loading" for f in seen for s in f["states"]), "no loading painted"
        assert any("tok/s" in s for f in seen for s in f["speeds"]), "no speed painted"
        # Not one painted State word cut, nor one that "cancelling…" or "incomplete" would be.
        cut = [(f["states"]) for f in seen if any(any(s[1:]) for s in f["states"])]
        assert cut == [], cut[:3]
        # Every column where it was at the first row's first paint, all along.
        moved = [f["edges"] for f in seen if f["edges"] != seen[0]["edges"]]
        assert moved == [], (seen[0]["edges"], moved[:3])
