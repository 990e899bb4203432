"""The real window when a model's engine is SIGKILLed under a task that resumes: its task
loads the model again at once, and the row's Loaded cell keeps showing the crash (time,
signal, the task resumed) beside "loaded", as docs/engine.md says, until the user unloads
(or loads) it by hand. It said plain "loaded": the crash showed only while unloaded, which
with resumed tasks is a moment."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from lmsp_desktop.gui.models.model_table import COL_LOADED
from lmsp_desktop.gui.models.task_table import COL_STATE
from tests.integration.gui_windows import client_token, post_background
from tests.support.polling import until

pytestmark = pytest.mark.gui

MODEL = "smollm2-135m-instruct"


async def test_a_crash_stays_on_the_row_once_its_tasks_load_the_model_again(
    gui_app: tuple[Any, Any],
) -> None:
    core, window = gui_app
    token = await client_token(core)
    task_id = await post_background(
        core,
        token,
        model=MODEL,
        input="Write a long story.",
        max_output_tokens=200,
        on_restart="resume",
    )
    await until(
        lambda: core.runner.engine_pid(MODEL) is not None and core.runner._active,
        120,
        "the task to be generating",
    )
    pid = core.runner.engine_pid(MODEL)
    assert pid is not None and pid != os.getpid()
    os.kill(pid, signal.SIGKILL)

    tasks = window.tasks

    def task_state() -> str:
        r = tasks.model.row_of(task_id)
        return "" if r is None else str(tasks.model.index(r, COL_STATE).data())

    await until(lambda: task_state() in ("completed", "incomplete"), 180, task_state)
    models = window.models
    row = next(r for r in range(models.model.rowCount()) if models.model.model_id(r) == MODEL)
    cell = models.model.index(row, COL_LOADED)
    await until(lambda: core.model_loaded_state(MODEL) == "loaded", 60, "loaded again")
    await until(lambda: str(cell.data()).startswith("loaded"), 30, lambda: cell.data())
    text = str(cell.data())
    assert "crashed" in text and "(SIGKILL)" in text and "1 resumed" in text, text
    tooltip = str(cell.data(3))  # ToolTipRole
    assert "SIGKILL" in tooltip and "loaded again for its tasks" in tooltip, tooltip

    models.table.selectRow(row)
    await until(
        lambda: models.load_button.text() == "Unload" and models.load_button.isEnabled(),
        what="Unload enabled",
    )
    models.load_button.click()
    await until(lambda: core.model_loaded_state(MODEL) == "unloaded", 60, "unloaded")
    await until(lambda: str(cell.data()) == "", 30, lambda: cell.data())  # cleared by hand
    assert "crashed" not in str(models.status.text())
    assert models.load_button.text() == "Load"
