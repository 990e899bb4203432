"""A file copied over a loaded model (`cp other.gguf models/mine.gguf`) on the Models page:
its row says changed, and its Size is what is at its path now, the facts and the memory
estimate marked as the verified file's. The row kept the old 93.8 MiB and "fits" as the
file's. Real core (store, registry reading real GGUF headers, the fake engine loading it),
real MainWindow, real files."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.format import human_size
from lmsp_desktop.gui.models.model_table import COL_PARAMS, COL_SIZE, COL_STATUS
from tests.integration.gui_windows import open_app
from tests.support.polling import until
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_registry import touch_later

pytestmark = pytest.mark.gui
SMALL = {"blk.0.w": (1024, 1024), "norm": (8,)}
BIG = {"blk.0.w": (4096, 1024), "blk.1.w": (4096, 1024), "norm": (8,)}


async def test_a_file_copied_over_a_loaded_model_shows_its_own_size(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    mine = write_gguf(folder / "mine.gguf", tensors=SMALL)
    other = write_gguf(tmp_path / "other.gguf", tensors=BIG)
    old, new = mine.stat().st_size, other.stat().st_size
    assert human_size(old) != human_size(new)
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (core, window):
        page = window.models
        window.nav.setCurrentRow(1)

        def cell(col: int, role: int = Qt.ItemDataRole.DisplayRole) -> str:
            row = page.model.row_of("mine")
            return "" if row is None else str(page.model.index(row, col).data(role))

        await until(lambda: cell(COL_STATUS).startswith("✓ verified"), 30, lambda: cell(0))
        assert cell(COL_SIZE) == human_size(old)
        await core.load_model_again("mine")
        await until(lambda: core.model_loaded_state("mine") == "loaded", 30, "loaded")

        shutil.copyfile(other, mine)  # cp other.gguf models/mine.gguf
        touch_later(mine)
        page.rescan_button.click()
        await until(lambda: cell(COL_STATUS) == "⚠ changed", 30, lambda: cell(COL_STATUS))
        await until(lambda: cell(COL_SIZE) == f"⚠ {human_size(new)}", 30, lambda: cell(COL_SIZE))
        tip = cell(COL_SIZE, Qt.ItemDataRole.ToolTipRole)
        assert f"{new:,} bytes" in tip and human_size(old) in tip, tip
        assert "of the file verified" in cell(COL_PARAMS, Qt.ItemDataRole.ToolTipRole)

        row = page.model.row_of("mine")
        assert row is not None
        page.table.selectRow(row)
        panel = page.memory
        await until(lambda: panel.model_id == "mine", what="the panel")
        await until(
            lambda: "file verified before" in panel.estimate.text(), 30, panel.estimate.text
        )
