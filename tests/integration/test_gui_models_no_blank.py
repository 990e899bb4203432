"""The Models table fills its width while Location is left out for room (walkH19: a blank
strip of ~60 px stayed at the table's right, where Location, the column that stretches,
had been). The real MainWindow over a real core (store, registry reading the real demo GGUF
in a folder), resized as a user drags the window's edge."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.gui.models.model_table import COL_FOLDER, COL_NAME
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def settle() -> None:
    """Let resizes, fits and repaints run (sleeping runs Qt's loop; never processEvents())."""
    for _ in range(5):
        await asyncio.sleep(0.05)


async def test_the_columns_fill_the_table_while_location_is_left_out(
    qtbot: Any, tmp_path: Path
) -> None:
    demo = demo_model_path()
    assert demo is not None
    folder = tmp_path / "a-folder-with-a-rather-long-name-for-its-models"
    folder.mkdir()
    os.link(demo, folder / "smol-4k.gguf")
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder]) as (
        _core,
        window,
    ):
        window.nav.setCurrentRow(1)  # Models
        page = window.models
        await until(lambda: page.model.row_of("smol-4k") is not None, what="smol-4k")
        table, header = page.table, page.table.horizontalHeader()
        seen: list[tuple[int, int, int]] = []  # (window width, columns' width, table's room)
        for width in range(900, 1600, 20):  # the window dragged wider, step by step
            window.resize(width, 700)
            await settle()
            if not header.isSectionHidden(COL_FOLDER):
                continue
            assert not header.isSectionHidden(COL_NAME)
            seen.append((width, header.length(), table.viewport().width()))
        assert seen, "Location was never left out: the widths tried do not test anything"
        blank = [(w, length, room) for w, length, room in seen if length != room]
        assert blank == [], blank  # no strip left blank, no sideways scrolling either
        assert table.horizontalScrollBar().maximum() == 0
        window.grab().save(str(tmp_path / "models-without-location.png"))
