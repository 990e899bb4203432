"""The progress-bar cell (gui/pages/progress_delegate.py, one delegate for a download's bytes
and a file being hashed) as the Models page shows a real hash under way: the bar with the
cell's text, sitting in its row (a selected row's highlight runs round it). A real core
hashing a real file (its reading held), the real MainWindow, the pixels as painted."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models import hashing
from lmsp_desktop.core.models.digests import sha256_file
from lmsp_desktop.gui.models.model_table import COL_NAME, COL_STATUS
from tests.integration.gui_windows import open_app
from tests.support.model_stores import demo, place
from tests.support.polling import until

pytestmark = pytest.mark.gui


def margin_colour(table: Any, row: int, col: int) -> QColor:
    """The colour one pixel inside the top-left corner of a cell: its background."""
    rect = table.visualRect(table.model().index(row, col))
    image = table.viewport().grab().toImage()
    return image.pixelColor(rect.topLeft() + QPoint(1, 1))


async def test_a_selected_models_row_keeps_its_highlight_round_the_hashing_bar(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first hash on this machine: not the digest another test's service kept (digest_cache).
    monkeypatch.setenv("LMSP_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "models"
    folder.mkdir()
    release = threading.Event()

    def held(*args: Any, **kwargs: Any) -> str:
        release.wait(timeout=60)  # the file stays "hashing" until the test has looked
        return sha256_file(*args, **kwargs)

    data = tmp_path / "data"
    async with open_app(
        qtbot, data, engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (core, window):
        monkeypatch.setattr(hashing, "sha256_file", held)
        place(demo(), folder / "smol.gguf")
        rescan = asyncio.ensure_future(core.rescan_models())
        try:
            window.nav.setCurrentRow(1)
            models = window.models
            await until(
                lambda: (
                    models.model.rowCount() == 1
                    and str(models.model.index(0, COL_STATUS).data()).startswith("hashing")
                ),
                what="the file listed as hashing",
            )
            models.table.clearSelection()
            unselected = margin_colour(models.table, 0, COL_NAME)
            models.table.selectRow(0)
            await until(lambda: models.table.selectionModel().isRowSelected(0))
            highlight = margin_colour(models.table, 0, COL_NAME)
            assert highlight != unselected
            assert margin_colour(models.table, 0, COL_STATUS) == highlight
            # The bar itself: its empty trough (0% hashed) above the text, not the
            # row's highlight a plain cell would show there.
            rect = models.table.visualRect(models.model.index(0, COL_STATUS))
            image = models.table.viewport().grab().toImage()
            trough = image.pixelColor(rect.center().x(), rect.top() + 5)  # above the text
            assert trough != highlight, trough.name()
        finally:
            release.set()
            await rescan
        await until(lambda: str(models.model.index(0, COL_STATUS).data()).startswith("✓"))
