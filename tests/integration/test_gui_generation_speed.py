"""The task table's Speed is the generation's rate, never one that counts the prompt's read:
the real window over a real core, the demo model reading a 2k+-token prompt in its engine
worker, then generating. While it generates, the Speed counts from the runner's first token;
once it ends, from the first token time stored with it, and the tooltip says the time to
first token and the prompt's read speed."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.gui.models.task_table import COL_TPS
from tests.integration.test_gui_prompt_progress import MODEL, PROMPT
from tests.support.polling import until

pytestmark = pytest.mark.gui

LIMIT_S = 600.0  # a bound on a hang on a loaded 2-core machine


async def test_the_speed_column_is_the_generation_rate_after_the_prompt_read(
    gui_app: tuple[Any, Any],
) -> None:
    core, window = gui_app
    prompt = PROMPT + "Tell the story of the baker."
    task_id = await core.submit(MODEL, prompt, max_output_tokens=64)
    table = window.tasks.model

    def cell(role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        row = table.row_of(task_id)
        return None if row is None else table.index(row, COL_TPS).data(role)

    def generating() -> bool:
        row = table.task(task_id)
        first = core.first_token_at(task_id)
        return row is not None and row.output_tokens > 0 and first is not None

    # While it generates: counted from the runner's first token (nothing stored yet).
    await until(generating, LIMIT_S, lambda: f"the row: {table.task(task_id)}")
    row = table.task(task_id)
    assert row is not None and row.first_token_at is None and row.finished_at is None
    assert "since the first token" in cell(Qt.ItemDataRole.ToolTipRole)

    async def finished() -> Any:
        stored = await core.task(task_id)
        return stored if stored["state"] in TERMINAL else None

    stored = await until(finished, LIMIT_S, "the task's end")

    def ended_row() -> Any:
        row = table.task(task_id)
        return row if row is not None and row.finished_at is not None else None

    row = await until(ended_row, what="the row's end")
    # Stored with its end, between its start and its end, after the prompt's read.
    first = row.first_token_at
    assert first is not None and row.started_at < first < row.finished_at
    assert row.output_tokens == stored["output_tokens"] > 1
    assert row.input_tokens == stored["input_tokens"] > 2000
    generation = row.output_tokens / (row.finished_at - first)
    whole_run = row.output_tokens / (row.finished_at - row.started_at)
    assert f"{generation:.1f}" != f"{whole_run:.1f}"  # the read is long beside the output
    assert cell() == f"{generation:.1f} tok/s"
    tip = cell(Qt.ItemDataRole.ToolTipRole)
    waited = first - row.started_at
    assert f"Generation: {row.output_tokens} tokens in" in tip
    assert f"the prompt's {row.input_tokens:,} tokens read at " in tip
    assert f"{row.input_tokens / waited:.1f} tok/s" in tip
    assert core.first_token_at(task_id) is None  # the runner forgot it with its run
