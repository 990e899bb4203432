"""The Models table's column widths: a width the user drags on the header is kept across a
restart (as the columns shown or hidden were, and the widths were not), and the header's menu
has "Reset columns" to go back to the widths that fit the content. Real core (store, the real
demo model in the registry), real MainWindow, the real mouse events of a drag on the header."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QApplication, QHeaderView

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.model_table import COL_NAME, COL_SIZE
from tests.integration.gui_windows import MODEL, open_app
from tests.integration.test_gui_models_columns import menu_action, right_click_header, settle
from tests.support.polling import until

pytestmark = pytest.mark.gui


def mouse(header: QHeaderView, kind: QEvent.Type, at: QPoint) -> None:
    """What the mouse delivers to the header (the offscreen platform makes no drags)."""
    held = Qt.MouseButton.NoButton if kind == QEvent.Type.MouseButtonRelease else None
    event = QMouseEvent(
        kind,
        QPointF(at),
        QPointF(header.viewport().mapToGlobal(at)),
        Qt.MouseButton.LeftButton,
        held if held is not None else Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(header.viewport(), event)


async def drag_edge(header: QHeaderView, col: int, by: int) -> None:
    """Drag the right edge of `col`'s section by `by` pixels, as a user does."""
    edge = header.sectionViewportPosition(col) + header.sectionSize(col) - 1
    y = header.height() // 2
    mouse(header, QEvent.Type.MouseButtonPress, QPoint(edge, y))
    for step in range(1, 5):
        mouse(header, QEvent.Type.MouseMove, QPoint(edge + by * step // 4, y))
    mouse(header, QEvent.Type.MouseButtonRelease, QPoint(edge + by, y))
    await settle()


# A popup menu on the offscreen platform (a real screen raises it and grabs the keyboard).
@pytest.mark.qt_log_ignore("does not support raise", "does not support grabbing")
async def test_a_dragged_column_width_is_kept_across_a_restart_and_reset_in_the_menu(
    qtbot: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    async with open_app(qtbot, data, engine=FakeEngine()) as (_core, window):
        window.resize(1398, 874)  # the default size: room for every column
        window.nav.setCurrentRow(1)
        await until(lambda: window.models.model.row_of(MODEL) is not None, what=MODEL)
        await settle()
        header = window.models.table.horizontalHeader()
        fitted = header.sectionSize(COL_SIZE)
        assert fitted == window.models.fitter.content_width(COL_SIZE)  # fitted to its content
        await drag_edge(header, COL_SIZE, 60)
        dragged = header.sectionSize(COL_SIZE)
        assert dragged == fitted + 60, (fitted, dragged)
        window.models.fitter.fit()  # a refit (a row changed, a resize) keeps what was dragged
        assert header.sectionSize(COL_SIZE) == dragged
        name = header.sectionSize(COL_NAME)

    # Opened again on the same settings: the width dragged is back, the others fitted.
    async with open_app(qtbot, data, engine=FakeEngine()) as (_core, window):
        window.resize(1398, 874)
        window.nav.setCurrentRow(1)
        await until(lambda: window.models.model.row_of(MODEL) is not None, what=MODEL)
        await settle()
        header = window.models.table.horizontalHeader()
        assert header.sectionSize(COL_SIZE) == dragged
        assert header.sectionSize(COL_NAME) == name
        # Reset columns: back to the content's width, and so after the next restart too.
        await right_click_header(window, qtbot)
        menu_action(window, "Reset columns").trigger()
        window.models.column_menu.close()
        await settle()
        assert header.sectionSize(COL_SIZE) == fitted

    async with open_app(qtbot, data, engine=FakeEngine()) as (_core, window):
        window.resize(1398, 874)
        window.nav.setCurrentRow(1)
        await until(lambda: window.models.model.row_of(MODEL) is not None, what=MODEL)
        await settle()
        assert window.models.table.horizontalHeader().sectionSize(COL_SIZE) == fitted
