""" "Try a prompt…" starts with the model a first-time user means: the loaded one, else the
one last used in this run, else the first listed. The walk found it on the first model
alphabetically (an LM Studio copy) while another was loaded, so Send loaded a second copy of
the same file. Real core (store, registry, runner) with the scripted engine, real window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.dialogs.prompt_dialog import PromptDialog
from tests.integration.gui_windows import open_app
from tests.support.polling import until
from tests.unit.core.test_models_gguf_meta import write_gguf

pytestmark = pytest.mark.gui


async def test_try_a_prompt_starts_with_the_loaded_then_the_last_used_model(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("alpha", "beta", "gamma"):
        write_gguf(folder / f"{name}.gguf")
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (core, window):
        page = window.models
        window.nav.setCurrentRow(1)
        await until(
            lambda: all(page.model.info(r).state == "verified" for r in range(3)),
            30,
            "three verified models",
        )

        async def open_prompt() -> PromptDialog:
            window.nav.setCurrentRow(0)
            qtbot.mouseClick(window.tasks.try_button, Qt.MouseButton.LeftButton)
            await until(
                lambda: isinstance(window.dialog, PromptDialog) and window.dialog.isVisible(),
                what="the prompt dialog",
            )
            dialog: PromptDialog = window.dialog
            return dialog

        def load_button_click(model_id: str) -> None:
            window.nav.setCurrentRow(1)
            row = page.model.row_of(model_id)
            assert row is not None
            page.table.selectRow(row)
            qtbot.mouseClick(page.load_button, Qt.MouseButton.LeftButton)

        # Nothing loaded, nothing used: the first listed.
        dialog = await open_prompt()
        assert dialog.model.currentText() == "alpha"
        dialog.reject()

        # Gamma loaded from the Models page: the dialog starts with it, and Send runs there
        # without loading another model.
        load_button_click("gamma")
        await until(lambda: core.model_loaded_state("gamma") == "loaded", 30, "gamma loaded")
        dialog = await open_prompt()
        assert dialog.model.currentText() == "gamma"
        qtbot.mouseClick(dialog.send, Qt.MouseButton.LeftButton)
        await until(lambda: bool(window.tasks.selected_ids()), what="the new task selected")
        (task_id,) = window.tasks.selected_ids()
        await until(lambda: window.tasks.model.task(task_id).state == "completed", 30, "done")
        assert [m for m in ("alpha", "beta") if core.model_loaded_state(m) != "unloaded"] == []

        # Unloaded again: the last one used in this run.
        load_button_click("gamma")  # Unload
        await until(lambda: core.model_loaded_state("gamma") == "unloaded", 30, "unloaded")
        dialog = await open_prompt()
        assert dialog.model.currentText() == "gamma"
        dialog.reject()

        # Another model loaded: that one, over the last used.
        load_button_click("beta")
        await until(lambda: core.model_loaded_state("beta") == "loaded", 30, "beta loaded")
        dialog = await open_prompt()
        assert dialog.model.currentText() == "beta"
        dialog.reject()
