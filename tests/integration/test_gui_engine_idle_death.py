"""The real window when an idle model's engine worker is SIGKILLed (walk C18 finding 1):
loaded with the Models page's Load, killed with no task on it, the Loaded cell leaves
"loaded" at once for the crash (signal, no unfinished tasks, the next request loads it
again), the sidebar no longer lists it, and a client's next request completes and shows it
loaded again."""

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


async def test_an_idle_engine_killed_shows_crashed_and_the_next_request_runs(
    gui_app: tuple[Any, Any],
) -> None:
    core, window = gui_app
    models = window.models
    row = next(r for r in range(models.model.rowCount()) if models.model.model_id(r) == MODEL)
    cell = models.model.index(row, COL_LOADED)
    models.table.selectRow(row)
    await until(lambda: models.load_button.isEnabled(), what="Load enabled")
    models.load_button.click()
    await until(lambda: str(cell.data()).startswith("loaded"), 120, lambda: cell.data())

    def sidebar() -> str:
        window._update_loaded()  # what the once-a-second refresh does
        return window.sidebar.loaded.text()

    pid = core.runner.engine_pid(MODEL)
    assert pid is not None and pid != os.getpid()

    assert MODEL in sidebar(), sidebar()
    os.kill(pid, signal.SIGKILL)
    await until(lambda: "crashed (SIGKILL" in str(cell.data()), 60, lambda: cell.data())
    tooltip = str(models.model.index(row, COL_LOADED).data(3))  # ToolTipRole
    assert "none unfinished" in tooltip and "The next request loads it again" in tooltip

    assert MODEL not in sidebar(), sidebar()

    token = await client_token(core)
    task_id = await post_background(
        core, token, model=MODEL, input="Say hi.", max_output_tokens=4, on_restart="fail"
    )
    tasks = window.tasks

    def task_state() -> str:
        r = tasks.model.row_of(task_id)
        return "" if r is None else str(tasks.model.index(r, COL_STATE).data())

    await until(lambda: task_state() in ("completed", "incomplete"), 120, task_state)
    await until(lambda: str(cell.data()).startswith("loaded"), 30, lambda: cell.data())
    assert core.runner.engine_pid(MODEL) not in (None, pid)
