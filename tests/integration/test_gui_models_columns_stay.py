"""The Models table's columns stay put as models load and downloads are listed: at the
default 1200×780 a hub download's long name dropped Quantization and Architecture even with
Parameters hidden, and a model showing "loaded · 10 min" or "✗ crashed (SIGKILL, …)" dropped
Architecture. Now the long Name and Loaded cells are cut first (whole on hover). Real core
(store, registry reading the real demo GGUF in a Hugging Face cache), real MainWindow."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEvent
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QStyleOptionViewItem, QToolTip

from lmsp_desktop.core.crashes import CrashRecord
from lmsp_desktop.core.engines.base import EngineCrashed
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.model_table import (
    COL_ARCH,
    COL_FOLDER,
    COL_LOADED,
    COL_NAME,
    COL_PARAMS,
    COL_QUANT,
    COL_STATUS,
)
from tests.integration.gui_windows import MODEL, open_app
from tests.support import model_stores as stores
from tests.support.polling import until

pytestmark = pytest.mark.gui
HF_ID = "huggingfacetb/smollm2-135m-instruct-gguf:q4_1"


@pytest.fixture
def hub_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)


async def settle() -> None:
    """Let resizes, fits and repaints run (sleeping runs Qt's loop; never processEvents())."""
    for _ in range(5):
        await asyncio.sleep(0.05)


def tooltip_of(page: Any, row: int, col: int) -> str:
    """What hovering the cell shows (the cell's delegate answers the help event)."""
    table = page.table
    index = page.model.index(row, col)
    rect = table.visualRect(index)
    option = QStyleOptionViewItem()
    option.initFrom(table.viewport())
    option.rect = rect
    global_pos = table.viewport().mapToGlobal(rect.center())
    event = QHelpEvent(QEvent.Type.ToolTip, rect.center(), global_pos)
    QToolTip.hideText()
    table.itemDelegateForIndex(index).helpEvent(event, table, option, index)
    return QToolTip.text()


@pytest.mark.qt_log_ignore("does not support raise", "does not support propagateSizeHints")
async def test_columns_stay_as_models_load_and_crash(
    hub_home: None, qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine(["hi"])) as (core, window):
        window.resize(1200, 780)
        window.nav.setCurrentRow(1)
        page = window.models
        await until(lambda: page.model.row_of(HF_ID) is not None, 30, what="the download")
        hf = page.model.row_of(HF_ID)
        await until(
            lambda: "verified" in str(page.model.index(hf, COL_STATUS).data()), 30, what="hash"
        )
        page.set_column_wanted(COL_PARAMS, False)
        await settle()
        header = page.table.horizontalHeader()
        shown = [c for c in (COL_ARCH, COL_QUANT) if not header.isSectionHidden(c)]
        assert shown == [COL_ARCH, COL_QUANT]
        # The long name is cut in its middle (its tag kept), whole on hover.
        assert header.sectionSize(COL_NAME) < page.fitter.content_width(COL_NAME)
        assert tooltip_of(page, hf, COL_NAME).startswith(HF_ID + "\n")

        demo = page.model.row_of(MODEL)
        page.table.selectRow(demo)
        await until(lambda: page.load_button.isEnabled(), what="Load")
        page.load_button.click()
        await until(
            lambda: "loaded · " in str(page.model.index(demo, COL_LOADED).data()), 30, what="cell"
        )
        await settle()
        assert not header.isSectionHidden(COL_ARCH) and not header.isSectionHidden(COL_QUANT)

        crash = CrashRecord(
            HF_ID, "SIGKILL", time.time(), EngineCrashed(HF_ID, "SIGKILL"), {"failed": 1}, held=True
        )
        real = core.model_crash
        monkeypatch.setattr(core, "model_crash", lambda m: crash if m == HF_ID else real(m))
        await page.model.reload()
        await settle()
        cell = str(page.model.index(hf, COL_LOADED).data())
        assert cell.startswith("✗ crashed (SIGKILL")
        assert not header.isSectionHidden(COL_ARCH) and not header.isSectionHidden(COL_QUANT)
        assert header.sectionSize(COL_LOADED) < page.fitter.content_width(COL_LOADED)
        tip = tooltip_of(page, hf, COL_LOADED)
        assert tip.startswith(cell + "\n") and "ended with SIGKILL" in tip, tip

        # Parameters asked back: it is shown, Location having gone first (then Architecture,
        # the digest verdict after them, Quantization and Context last), and the cut Name
        # keeps more than its least (the Location is not stretched wider instead).
        page.set_column_wanted(COL_PARAMS, True)
        await settle()
        assert header.isSectionHidden(COL_FOLDER) and not header.isSectionHidden(COL_PARAMS)
        assert page.table.horizontalScrollBar().maximum() == 0
        assert not header.isSectionHidden(COL_QUANT)
        assert header.sectionSize(COL_NAME) > page.name_least
