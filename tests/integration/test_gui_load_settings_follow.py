"""The Models page's Load settings against the store, as a walk found them: after
`lmsp-desktop models set … --context` while the window was open the panel still read "auto"
until another row was clicked; Save was enabled with nothing changed, so one click wrote the
stale values over the CLI's; on a cut file the fields stayed editable while Save was disabled.
Real core (store, registry, fitter reading real GGUF headers), real MainWindow, and the real
CLI in its own process."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.storage.model_settings import get_settings
from tests.integration.gui_windows import MODEL, open_app
from tests.integration.test_gui_model_memory import select
from tests.support.polling import until
from tests.unit.core.test_models_gguf_meta import write_gguf

pytestmark = pytest.mark.gui
ROOT = Path(__file__).resolve().parents[2]


async def cli(data_dir: Path, *args: str) -> str:
    """`lmsp-desktop --data-dir DIR ARGS…` in its own process, as a user types it beside the
    open window (awaited, never blocking the window's loop)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lmsp_desktop",
        "--data-dir",
        str(data_dir),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    return out.decode()


async def test_the_panel_follows_a_cli_change_and_offers_save_only_for_a_change(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        window.nav.setCurrentRow(1)
        panel = window.models.memory
        select(window, MODEL)
        await until(lambda: panel.last_plan is not None, what="the first estimate")
        assert panel.context.value() == 0  # auto
        assert not panel.save_button.isEnabled()  # nothing changed: nothing to save
        assert "saved settings" in panel.save_button.toolTip()

        said = await cli(tmp_path, "models", "set", MODEL, "--context", "4096")
        assert "4096" in said
        # The panel shows the stored value without another click, and its estimate with it.
        await until(lambda: panel.context.value() == 4096, what=lambda: panel.context.text())
        await until(
            lambda: panel.runs_with.text().startswith("4,096 tokens"),
            what=lambda: panel.runs_with.text(),
        )
        assert "outside this window" in panel.saved.text()
        assert not panel.save_button.isEnabled()  # still nothing to save

        panel.context.setValue(2048)  # as a user typing it
        assert panel.save_button.isEnabled() and panel.revert_button.isEnabled()
        panel.context.setValue(4096)  # typed back: nothing to save again
        assert not panel.save_button.isEnabled() and not panel.revert_button.isEnabled()

        panel.context.setValue(2048)
        qtbot.mouseClick(panel.save_button, Qt.MouseButton.LeftButton)
        await until(lambda: "next load" in panel.saved.text(), what=lambda: panel.saved.text())
        assert (await get_settings(core.store.db, MODEL)).context_length == 2048
        assert not panel.save_button.isEnabled()


async def test_a_file_that_can_never_run_offers_no_field_to_edit(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    big = {"blk.0.w": (2048, 1024), "norm": (8,)}
    whole = write_gguf(tmp_path / "whole.gguf", tensors=big).read_bytes()
    (folder / "half.gguf").write_bytes(whole[: len(whole) // 2])  # an unfinished download
    write_gguf(folder / "tiny.gguf", tensors=big)
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (_core, window):
        page = window.models
        window.nav.setCurrentRow(1)
        panel = page.memory
        await until(lambda: page.model.row_of("half") is not None, 30, "the cut file")
        await until(
            lambda: page.model.info(page.model.row_of("half")).state == "invalid",
            30,
            "the cut file judged",
        )
        select(window, "half")
        await until(lambda: panel.model_id == "half" and panel.isEnabled(), what="the panel")
        await until(lambda: "never runs" in panel.estimate.text(), what=panel.estimate.text)
        editors = (panel.context, panel.parallel, panel.kv_type, panel.gpu_mode, panel.gpu_layers)
        assert [e.isEnabled() for e in editors] == [False] * len(editors)
        assert not panel.save_button.isEnabled() and not panel.revert_button.isEnabled()

        await until(
            lambda: (
                page.model.row_of("tiny") is not None
                and page.model.info(page.model.row_of("tiny")).state == "verified"
            ),
            30,
            "the whole file verified",
        )
        select(window, "tiny")  # a file that runs: its fields are editable again
        await until(lambda: panel.model_id == "tiny" and panel.context.isEnabled(), what="tiny")
        assert panel.parallel.isEnabled() and panel.kv_type.isEnabled()
