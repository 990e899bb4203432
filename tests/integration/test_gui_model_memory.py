"""The Models page shows what a model will take before it is loaded, follows every change of
its settings, and saves them for the next load (GUI.md third edition). Real core (store,
registry, fitter reading the real GGUF header and this machine's memory), real window."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QItemSelectionModel, Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models import machine
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.memory import AUTO_CONTEXT_RULE
from lmsp_desktop.core.storage.model_settings import get_settings
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui
MODEL = "smollm2-135m-instruct"


def select(window: Any, model_id: str) -> None:
    table = window.models.model
    row = next(r for r in range(table.rowCount()) if table.model_id(r) == model_id)
    window.models.table.selectionModel().select(
        table.index(row, 0),
        QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows,
    )


async def test_the_estimate_follows_the_settings_and_save_applies_at_the_next_load(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        panel = window.models.memory
        assert not panel.isEnabled()  # nothing selected yet
        select(window, MODEL)
        await until(lambda: panel.last_plan is not None, what="the first estimate")
        first = panel.last_plan
        assert first.context_length == 8192  # the demo's trained context fits here
        assert "fits" in panel.estimate.text() and "8,192 tokens" in panel.runs_with.text()
        shown = panel.estimate.text()

        panel.context.setValue(2048)  # as a user typing it would
        await until(lambda: panel.estimate.text() != shown, what="the estimate to change")
        smaller = panel.last_plan
        assert smaller.context_length == 2048
        assert smaller.estimate.kv_cache * 4 == first.estimate.kv_cache
        assert "2,048 tokens" in panel.runs_with.text()
        assert panel.saved.text() == "Not saved yet."
        assert await get_settings(core.store.db, MODEL) == type(panel.settings())()  # unsaved

        qtbot.mouseClick(panel.save_button, Qt.MouseButton.LeftButton)
        await until(lambda: "next load" in panel.saved.text(), what=lambda: panel.saved.text())
        assert (await get_settings(core.store.db, MODEL)).context_length == 2048
        # The next load takes it: the engine is given the saved context.
        await core.submit(MODEL, "Hello")
        engine = core._engine
        assert isinstance(engine, FakeEngine)
        await until(lambda: engine.loaded_settings, what="a load")
        assert engine.loaded_settings[0] is not None
        assert engine.loaded_settings[0].context_length == 2048


async def test_a_load_that_will_not_fit_is_red_with_the_reason(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo = demo_model_path()
    assert demo is not None
    folder = tmp_path / "models"
    folder.mkdir()
    os.link(demo, folder / "tiny.gguf")
    monkeypatch.setenv(machine.AVAILABLE_ENV, "600M")
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder]) as (
        _core,
        window,
    ):
        panel = window.models.memory
        await until(lambda: window.models.model.rowCount() >= 2, what="the folder's model")
        select(window, "tiny")
        await until(lambda: panel.last_plan is not None, what="the first estimate")
        panel.context.setValue(8192)
        panel.parallel.setValue(8)  # 8 x 8192 tokens of KV cache: about 1.5 GiB
        await until(
            lambda: panel.last_plan is not None and panel.last_plan.fit == "wont_fit",
            what=lambda: panel.estimate.text(),
        )
        text = panel.estimate.text()
        assert "will not fit" in text and "#c62828" in text
        assert "600 MiB available" in text and "Lower the context length" in text


@pytest.mark.parametrize("max_context", [None, 4096])
async def test_the_context_box_says_what_auto_gives(
    qtbot: Any, tmp_path: Path, max_context: int | None
) -> None:
    """Auto is the default rule (docs/memory.md, `models set --help`): the trained context
    within 8,192 or the Max context, less when memory is short. The box said "auto (fit the
    memory)", which promised a 128k model its whole context; it says the longest auto gives
    the selected model, and its tooltip the whole rule, in the help's words."""
    async with open_app(qtbot, tmp_path, engine=FakeEngine(), max_context=max_context) as (
        _core,
        window,
    ):
        panel = window.models.memory
        top = "4,096" if max_context else "8,192"
        assert panel.context.text() == f"auto (up to {top})"  # nothing selected: the cap
        assert AUTO_CONTEXT_RULE in panel.context.toolTip()
        select(window, MODEL)
        await until(lambda: panel.last_plan is not None, what="the first estimate")
        assert panel.context.value() == 0 and panel.context.text() == f"auto (up to {top})"
        assert panel.runs_with.text().startswith(f"{top} tokens per request (trained 8,192)")
