"""The task table says how far a running task's prompt has been read: the real window over a
real core, the demo model reading a 2k+-token prompt in its engine worker. The Output cell
reads "42%" on a bar while the prompt is read (its tooltip "reading the prompt: 2,412 tokens
(1,024 read so far)"), then the output
tokens once they come."""

from __future__ import annotations

import re
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.gui.models.task_table import COL_STATE, COL_TOKENS, Role
from tests.support.polling import until

pytestmark = pytest.mark.gui

MODEL = "smollm2-135m-instruct"
PROMPT = "".join(
    f"Line {i}: the baker weighed {i * 3} grams of flour and {i % 11} eggs this morning. "
    for i in range(150)
)
READING = re.compile(r"^(\d+)%$")  # on the bar; the tooltip has the counts
TIP = re.compile(r"reading the prompt: ([\d,]+) tokens \(([\d,]+) read so far\)")
READ_LIMIT_S = 600.0  # a bound on a hang on a loaded 2-core machine


async def test_the_output_cell_shows_the_prompt_read_then_the_tokens(
    gui_app: tuple[Any, Any],
) -> None:
    core, window = gui_app
    task_id = await core.submit(MODEL, PROMPT + "How many eggs in total?", max_output_tokens=4)
    table = window.tasks.model

    def cell(col: int, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        row = table.row_of(task_id)
        return None if row is None else table.index(row, col).data(role)

    def reading_further() -> re.Match[str] | None:
        text = str(cell(COL_TOKENS) or "")
        # Before its read begins (the model's load, its admission) it may say it waits.
        assert text in ("", "—", "0", "waiting") or READING.match(text), f"the read unseen: {text}"
        tip = TIP.search(str(cell(COL_TOKENS, Qt.ItemDataRole.ToolTipRole) or ""))
        return tip if READING.match(text) and tip and int(tip.group(2).replace(",", "")) else None

    match = await until(
        reading_further, READ_LIMIT_S, lambda: f"the Output cell: {cell(COL_TOKENS)}"
    )
    total, done = (int(group.replace(",", "")) for group in match.groups())
    assert 0 < done < total > 2000
    assert cell(COL_STATE) == "running"
    # On the cell's bar, as a download's bytes are; its tooltip says what it is.
    fraction = cell(COL_TOKENS, Role.PROGRESS)
    assert fraction is not None and 0 < fraction < 1
    assert f"reading the prompt: {total:,} tokens" in cell(COL_TOKENS, Qt.ItemDataRole.ToolTipRole)

    # Output follows the read: the cell shows the tokens, no bar.
    async def finished() -> Any:
        row = await core.task(task_id)
        return row if row["state"] in TERMINAL else None

    row = await until(finished, READ_LIMIT_S, "the task's end")
    assert row["input_tokens"] == total and row["output_tokens"] >= 1
    await until(
        lambda: cell(COL_TOKENS) == str(row["output_tokens"]),
        what=lambda: f"the Output cell: {cell(COL_TOKENS)}",
    )
    assert cell(COL_TOKENS, Role.PROGRESS) is None
