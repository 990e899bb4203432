"""The Tasks table at the default window size (1200×780) with the long cells a download
brings (the nineteenth walk): a client named "lmsp-desktop models pull", a long repo:file
model, and an Output cell "1.0 MiB / 3.0 MiB, waiting for the hub until 18:58:57". The Id
stays readable in its short form, On restart and Created stay, and the long cells are cut
at their end (whole on hover) instead of pushing the others out. The header's right-click
menu shows and hides columns as the Models page's does, and the choice is kept. Real
MainWindow over a real core and a real (fake) hub on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QToolTip

from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.clients import create_client
from lmsp_desktop.gui.format import short_id
from lmsp_desktop.gui.models.task_table import (
    COL_CLIENT,
    COL_CREATED,
    COL_ID,
    COL_ON_RESTART,
    COL_TOKENS,
    HEADERS,
)
from lmsp_desktop.gui.pages.task_table_view import cut_id
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import TINY_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


@pytest.mark.qt_log_ignore("does not support raise", "does not support grabbing")
async def test_long_cells_are_cut_and_the_id_created_and_on_restart_stay_at_1200(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        window.resize(1200, 780)
        client, _token = await create_client(
            core.store.db, "lmsp-desktop models pull", frozenset({"admin"})
        )
        hub.server.bytes_per_s = 256 * 1024
        task = await pull(core.store.tasks, TINY_REPO, "tiny-Q8_0.gguf", client_id=client["id"])
        task_id = str(task["id"])
        tasks = window.tasks
        model, table = tasks.model, tasks.table
        header = table.horizontalHeader()

        def cell(col: int) -> str:
            row = model.row_of(task_id)
            return "" if row is None else str(model.index(row, col).data())

        async def some_bytes() -> bool:
            rows = await core.task_event_rows(task_id, 0, 100)
            return any(r["type"] == "download.progress" for r in rows)

        await until(some_bytes, 30, "its first bytes")
        await hub.server.stop()  # the hub goes away: the cell says it waits, and until when
        await until(lambda: "waiting for the hub until" in cell(COL_TOKENS), 30, cell)
        await until(lambda: not tasks.fitter._timer.isActive())
        tasks.fitter.fit()
        window.grab().save(str(tmp_path / "columns-1200.png"))
        hidden = [HEADERS[c] for c in tasks.fitter.hidden_columns()]
        assert hidden == [], hidden
        metrics = table.fontMetrics()
        # The Id at least whole in its short form (it was "dl_......4cb8"): the cell holds the
        # whole id, painted cut to its prefix and as much of its end as the column has room for.
        assert cell(COL_ID) == task_id
        shown = cut_id(task_id, header.sectionSize(COL_ID) - 6, metrics)
        assert shown.startswith("dl_") and shown.endswith(short_id(task_id)[-8:]), shown
        for col in (COL_ID, COL_ON_RESTART, COL_CREATED):  # as wide as their content asks
            assert header.sectionSize(col) >= tasks.fitter.content_width(col), HEADERS[col]
        # The long Output cell is cut at its end, and whole in its tooltip.
        row = model.row_of(task_id)
        assert row is not None
        rect = table.visualRect(model.index(row, COL_TOKENS))
        assert header.sectionSize(COL_TOKENS) < metrics.horizontalAdvance(cell(COL_TOKENS))
        QToolTip.hideText()
        event = QHelpEvent(
            QHelpEvent.Type.ToolTip, rect.center(), table.viewport().mapToGlobal(rect.center())
        )
        table.viewportEvent(event)
        await until(QToolTip.isVisible, what="the Output cell's tooltip")
        assert QToolTip.text().startswith(cell(COL_TOKENS)), QToolTip.text()
        QToolTip.hideText()
        assert cell(COL_CLIENT) == "lmsp-desktop models pull"
        # At 900 px the least useful step aside; the Id keeps at least its end "…8f2a91c0".
        window.resize(900, 600)
        id_end = table.fontMetrics().horizontalAdvance("…00000000") + 8
        await until(
            lambda: (
                bool(tasks.fitter.hidden_columns()) and table.horizontalScrollBar().maximum() == 0
            ),
            what=lambda: [HEADERS[c] for c in tasks.fitter.hidden_columns()],
        )
        assert header.sectionSize(COL_ID) >= id_end
        window.grab().save(str(tmp_path / "columns-900.png"))
        window.resize(1200, 780)
        await until(lambda: not tasks.fitter.hidden_columns(), what=tasks.fitter.hidden_columns)

        # The header's menu: each column but the Id, ticked while shown; unticking hides it,
        # and the choice outlives the page (kept in the window's settings).
        menu = tasks.open_column_menu(QPoint(10, 5))
        titles = [a.text() for a in menu.actions() if a.isCheckable()]
        assert titles == HEADERS[1:], titles
        created = next(a for a in menu.actions() if a.text() == "Created")
        assert created.isChecked()
        created.toggle()
        assert header.isSectionHidden(COL_CREATED)
        menu.close()
        assert window.qsettings.value("tasks/hidden_columns") == "Created"
        menu = tasks.open_column_menu(QPoint(10, 5))
        assert not next(a for a in menu.actions() if a.text() == "Created").isChecked()
        reset = next(a for a in menu.actions() if a.text() == "Reset columns")
        reset.trigger()
        assert not header.isSectionHidden(COL_CREATED)
        menu.close()
        await core.cancel(task_id)
        assert Qt.ContextMenuPolicy.CustomContextMenu == header.contextMenuPolicy()
