"""The real window when a model's engine worker process is SIGKILLed mid-generation: the
window stays up, the model's row says the engine crashed (signal, time, what became of its
tasks), the task says engine crashed, and Load again loads the model with one click."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from lmsp_desktop.gui.format import human_size
from lmsp_desktop.gui.models.model_table import COL_LOADED
from lmsp_desktop.gui.models.task_table import COL_STATE
from tests.integration.gui_windows import client_token, post_background
from tests.support.polling import until

pytestmark = pytest.mark.gui

MODEL = "smollm2-135m-instruct"


async def test_the_window_shows_a_killed_engine_and_loads_it_again(
    gui_app: tuple[Any, Any],
) -> None:
    core, window = gui_app
    token = await client_token(core)
    task_id = await post_background(
        core,
        token,
        model=MODEL,
        input="Write a long story.",
        max_output_tokens=300,
        on_restart="fail",
    )
    await until(
        lambda: core.runner.engine_pid(MODEL) is not None and core.runner._active,
        120,
        "the task to be generating",
    )
    pid = core.runner.engine_pid(MODEL)
    assert pid != os.getpid()
    # The sidebar says what the engine process holds (weights, KV cache, buffers, its own
    # Python), not the file's size.
    file_size = next(m.size_bytes for m in await core.models() if m.id == MODEL)
    assert (core.model_memory(MODEL) or 0) > file_size

    def sidebar() -> str:
        window._update_loaded()  # what the once-a-second refresh does
        return window.sidebar.loaded.text()

    await until(lambda: "<br>loaded" in sidebar(), 60, sidebar)
    assert " in memory" in sidebar() and f"{human_size(file_size)} in memory" not in sidebar()
    os.kill(pid, signal.SIGKILL)

    models = window.models
    row = next(r for r in range(models.model.rowCount()) if models.model.model_id(r) == MODEL)
    cell = models.model.index(row, COL_LOADED)
    await until(lambda: "crashed (SIGKILL" in str(cell.data()), 60, lambda: cell.data())
    tooltip = str(models.model.index(row, COL_LOADED).data(3))  # ToolTipRole
    assert "SIGKILL" in tooltip and "1 failed" in tooltip

    tasks = window.tasks

    def task_state() -> str:
        r = tasks.model.row_of(task_id)
        return "" if r is None else str(tasks.model.index(r, COL_STATE).data())

    await until(lambda: task_state() == "failed", 60, task_state)
    assert window.isVisible()

    models.table.selectRow(row)
    await until(
        lambda: models.load_button.text() == "Load again" and models.load_button.isEnabled(),
        what="Load again enabled",
    )
    models.load_button.click()
    await until(lambda: core.model_loaded_state(MODEL) == "loaded", 120, "the model loaded")
    await until(lambda: "loaded" in str(cell.data()), 30, lambda: cell.data())
    assert core.runner.engine_pid(MODEL) not in (None, pid)
    assert models.status.text() == f"{MODEL} is loaded."
