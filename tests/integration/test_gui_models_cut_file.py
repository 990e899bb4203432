"""A GGUF cut short (half an unfinished download) on the Models page, as a first-time user
walked it: the page said "not a model" with an either/or reason ("the Status tooltip says
which"), the memory box said the header could not be read while the reason quoted the tensor
sizes read from that header, and Save stayed enabled for a file that can never run. Real
core (store, registry reading real GGUF headers), real MainWindow, a real cut file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.model_table import COL_STATUS
from tests.integration.gui_windows import open_app
from tests.support.polling import until
from tests.unit.core.test_models_gguf_meta import write_gguf

pytestmark = pytest.mark.gui
BIG = {"blk.0.w": (2048, 1024), "norm": (8,)}


async def test_a_cut_file_says_why_at_once_and_offers_nothing_to_save(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    whole = write_gguf(tmp_path / "whole.gguf", tensors=BIG).read_bytes()
    (folder / "half.gguf").write_bytes(whole[: len(whole) // 2])  # an unfinished download
    write_gguf(folder / "tiny.gguf", tensors=BIG)  # a whole one beside it
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (_core, window):
        page = window.models
        window.nav.setCurrentRow(1)

        def status(model_id: str) -> str:
            row = page.model.row_of(model_id)
            return "" if row is None else str(page.model.index(row, COL_STATUS).data())

        await until(lambda: status("half") == "✗ not a model", 30, lambda: status("half"))
        await until(lambda: status("tiny").startswith("✓ verified"), 30, lambda: status("tiny"))
        row = page.model.row_of("half")
        assert row is not None
        tooltip = str(page.model.index(row, COL_STATUS).data(Qt.ItemDataRole.ToolTipRole))
        assert "shorter than its tensors need" in tooltip  # the registry knows the reason
        page.table.selectRow(row)
        panel = page.memory
        # The exact reason under the table at once, without a Verify.
        await until(lambda: page.explain.isVisible(), what="the explanation")
        said = page.explain.text()
        assert "shorter than its tensors need" in said and "cut copy" in said, said
        assert "Status tooltip" not in said
        # The memory box agrees: the header was read; the file never runs.
        await until(lambda: panel.model_id == "half" and panel.isEnabled(), what="the panel")
        await until(lambda: "No estimate" in panel.estimate.text(), what=panel.estimate.text)
        assert "header cannot be read" not in panel.estimate.text()
        assert "never runs" in panel.estimate.text()
        # Nothing to save for it, and the button says why.
        assert not panel.save_button.isEnabled()
        assert "never runs" in panel.save_button.toolTip()
        assert not page.load_button.isEnabled()

        # The whole file beside it: fields to edit and an estimate again; Save once changed.
        page.table.selectRow(page.model.row_of("tiny"))
        await until(lambda: panel.last_plan is not None, 30, "the whole file's estimate")
        await until(lambda: "about" in panel.estimate.text(), what=panel.estimate.text)
        assert panel.context.isEnabled() and "never runs" not in panel.save_button.toolTip()
        panel.context.setValue(2048)
        assert panel.save_button.isEnabled() and panel.save_button.toolTip() == ""
        assert not page.explain.isVisible()
