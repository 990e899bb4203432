"""The Models page's context box writes a number as the table beside it does (walkH19: the
box said "4096 tokens" where the Context column said "4,096"), and typing a plain number in
it still sets it. The real MainWindow over a real core (store, registry, the demo's header)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QItemSelectionModel, QLocale, Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.model_settings import get_settings
from lmsp_desktop.gui.models.model_table import COL_CONTEXT
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui
MODEL = "smollm2-135m-instruct"


def grouped(n: int) -> str:
    """`n` with the locale's group separator, as the box writes it ("4,096" here; the C
    locale omits it unless asked, as a spin box showing separators asks)."""
    locale = QLocale()
    locale.setNumberOptions(locale.numberOptions() & ~QLocale.NumberOption.OmitGroupSeparator)
    return locale.toString(n)


async def type_into(qtbot: Any, box: Any, text: str) -> None:
    """As a user does: click into the box, select what it holds, type, press Enter."""
    edit = box.lineEdit()
    qtbot.mouseClick(edit, Qt.MouseButton.LeftButton)
    qtbot.keyClick(edit, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(edit, text)
    qtbot.keyClick(edit, Qt.Key.Key_Return)


async def test_the_context_box_groups_digits_as_the_table_and_takes_typed_numbers(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        window.nav.setCurrentRow(1)  # Models
        page, panel = window.models, window.models.memory
        row = page.model.row_of(MODEL)
        assert row is not None
        page.table.selectionModel().select(
            page.model.index(row, 0),
            QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows,
        )
        await until(lambda: panel.last_plan is not None, what="the first estimate")
        box = panel.context
        assert grouped(4096) != "4096"  # this locale groups digits (the test means it)

        await type_into(qtbot, box, "4096")
        assert box.value() == 4096
        assert box.text() == f"{grouped(4096)} tokens", box.text()
        qtbot.mouseClick(panel.save_button, Qt.MouseButton.LeftButton)
        await until(lambda: "next load" in panel.saved.text(), what=lambda: panel.saved.text())
        assert (await get_settings(core.store.db, MODEL)).context_length == 4096
        # The table's Context cell writes the number as the box does.
        cell = lambda: str(page.model.index(page.model.row_of(MODEL) or 0, COL_CONTEXT).data())  # noqa: E731
        await until(lambda: cell().startswith(f"{4096:,}"), what=cell)
        assert f"{4096:,}" == grouped(4096)  # the same number, written alike

        # A plain number typed over a grouped one still sets it, and is grouped once set.
        await type_into(qtbot, box, "8192")
        assert box.value() == 8192
        assert box.text() == f"{grouped(8192)} tokens", box.text()
        await until(lambda: panel.last_plan.context_length == 8192, what=panel.estimate.text)
        # Typed as the box writes it, too.
        await type_into(qtbot, box, grouped(2048))
        assert box.value() == 2048 and box.text() == f"{grouped(2048)} tokens"
