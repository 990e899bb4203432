"""The Models page's load-settings box over the fake core (real store, the real planner on a
demo-sized model, memory set by the test): the three verdicts, the GPU choices, Save."""

from __future__ import annotations

import asyncio

import pytest

from lmsp_desktop.core.engines.base import ALL_LAYERS
from lmsp_desktop.core.models.memory import GIB, Budget, ModelSettings
from lmsp_desktop.gui.pages.model_memory import GPU_ALL, GPU_NUMBER, ModelMemoryPanel
from tests.support.gui_core import FakeCore, fake_model
from tests.support.polling import until

pytestmark = pytest.mark.gui
MIB = 1 << 20


@pytest.fixture
async def panel(qtbot, core: FakeCore) -> ModelMemoryPanel:
    widget = ModelMemoryPanel(core)
    qtbot.addWidget(widget)
    widget.show()
    await widget.show_model("smollm2")
    return widget


async def verdict(panel: ModelMemoryPanel) -> str:
    await until(lambda: panel.last_plan is not None)
    assert panel.last_plan is not None
    return panel.last_plan.fit


async def test_green_amber_red_follow_the_memory_and_the_settings(panel, core) -> None:
    assert await verdict(panel) == "fits"
    assert "#2e7d32" in panel.estimate.text() and "fits" in panel.estimate.text()
    # 2.5 GiB free on a 8 GiB machine: within what is free, not within the 2 GiB reserve.
    core.memory = Budget(8 * GIB, 2 * GIB + 512 * MIB, "MemAvailable")
    panel.context.setValue(8192)
    await until(lambda: panel.last_plan.fit == "tight", what=lambda: panel.estimate.text())
    assert "#b26a00" in panel.estimate.text() and "tight" in panel.estimate.text()
    assert "leaves less than 2.00 GiB free" in panel.estimate.text()
    panel.parallel.setValue(16)
    await until(lambda: panel.last_plan.fit == "wont_fit", what=lambda: panel.estimate.text())
    assert "#c62828" in panel.estimate.text() and "will not fit" in panel.estimate.text()
    panel.kv_type.setCurrentText("q8_0")  # about half: back within what is free
    await until(lambda: panel.last_plan.fit == "tight", what=lambda: panel.estimate.text())


async def test_the_gpu_choices_and_save_keep_what_the_user_chose(panel, core) -> None:
    await verdict(panel)
    panel.gpu_mode.setCurrentText(GPU_NUMBER)
    assert panel.gpu_layers.isEnabled()
    panel.gpu_layers.setValue(12)
    panel.kv_type.setCurrentText("q8_0")
    panel.context.setValue(4096)
    assert panel.settings() == ModelSettings(4096, None, "q8_0", 12)
    await panel.save()
    assert "next load" in panel.saved.text()
    assert await core.model_settings("smollm2") == ModelSettings(4096, None, "q8_0", 12)
    assert not panel.revert_button.isEnabled()  # nothing unsaved
    panel.gpu_mode.setCurrentText(GPU_ALL)
    assert not panel.gpu_layers.isEnabled()
    # Another row, then back: the change not saved yet is still there, and says so.
    await panel.show_model(None)
    assert not panel.isEnabled()
    await panel.show_model("smollm2")
    assert panel.settings() == ModelSettings(4096, None, "q8_0", ALL_LAYERS)
    assert "Not saved yet" in panel.saved.text()
    assert await core.model_settings("smollm2") == ModelSettings(4096, None, "q8_0", 12)
    # Revert: the saved settings again, and nothing left unsaved.
    panel.revert_button.click()
    await until(lambda: panel.settings() == ModelSettings(4096, None, "q8_0", 12))
    assert not panel.revert_button.isEnabled()
    await panel.show_model(None)
    await panel.show_model("smollm2")
    assert panel.settings() == ModelSettings(4096, None, "q8_0", 12)
    assert "Not saved yet" not in panel.saved.text()


async def test_an_edit_while_the_next_models_settings_are_read_stays_the_shown_models(
    panel, core, monkeypatch
) -> None:
    await verdict(panel)
    core.models_list.append(fake_model("other"))
    read_other, other_asked = asyncio.Event(), asyncio.Event()
    stored = core.model_settings

    async def slow_settings(model_id: str) -> ModelSettings:
        if model_id == "other":
            other_asked.set()
            await read_other.wait()
        return await stored(model_id)

    monkeypatch.setattr(core, "model_settings", slow_settings)
    showing = asyncio.create_task(panel.show_model("other"))
    await other_asked.wait()  # "other" is being read; the controls hold smollm2's values
    panel.context.setValue(2048)
    read_other.set()
    await showing
    assert panel.settings().context_length is None  # other's own (stored) settings
    assert "Not saved yet" not in panel.saved.text()
    await panel.show_model("smollm2")
    assert panel.settings().context_length == 2048  # the edit was smollm2's
    assert "Not saved yet" in panel.saved.text()
