"""The selected task's Output tab, appended to as the demo model writes (not re-read per
flush), is exactly the task's output once it ends: completed, and cancelled midway."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.states import TERMINAL
from tests.support.polling import until

pytestmark = pytest.mark.gui

MODEL = "smollm2-135m-instruct"
PROMPT = "Write a very long story about a dragon who learns to bake bread."


async def test_output_tab_is_the_tasks_output_after_a_generation_and_a_cancel(
    gui_app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    core, window = gui_app
    tasks = window.tasks
    details = tasks.details
    reads: list[str] = []
    read = core.task

    async def counted(task_id: str) -> Any:
        reads.append(task_id)
        return await read(task_id)

    monkeypatch.setattr(core, "task", counted)
    # At each flush that told the pane only of new text: how many reads of a task so far.
    reads_at_text: list[int] = []
    heard = details.on_changes

    def on_changes(changes: dict[str, Any]) -> None:
        change = changes.get(details.task_id)
        if change is not None and set(change.event_types) == {"response.output_text.delta"}:
            reads_at_text.append(len(reads))
        heard(changes)

    monkeypatch.setattr(details, "on_changes", on_changes)  # the Tasks page calls it

    # A generation, followed to its end with the task selected (Output tab in front).
    task_id = await core.submit(MODEL, PROMPT, max_output_tokens=120)
    tasks.show_task(task_id)
    await until(lambda: details.task_id == task_id, what="the task in the pane")
    await until(lambda: details.state in TERMINAL, limit=120, what=lambda: details.state)
    row = await read(task_id)
    await until(
        lambda: details.output.toPlainText() == row["output_text"],
        what=lambda: f"{details.output.toPlainText()!r} vs {row['output_text']!r}",
    )
    assert row["output_text"] and row["output_tokens"] > 20
    # The text arrived over many flushes, and the task was read when shown and at its state
    # changes (started, ended) only: not once between its first and last flush of text.
    assert len(reads_at_text) >= 5, reads_at_text
    assert reads_at_text[-1] == reads_at_text[0], reads_at_text

    # Another, cancelled while it writes: the pane has exactly the text kept.
    task_id = await core.submit(MODEL, PROMPT, max_output_tokens=400)
    tasks.show_task(task_id)
    await until(lambda: details.task_id == task_id, what="the second task in the pane")
    await until(lambda: len(details.output.toPlainText()) > 40, limit=120, what="some output")
    details.cancel_button.click()
    await until(lambda: details.state == "cancelled", limit=60, what=lambda: details.state)
    row = await read(task_id)
    assert row["state"] == "cancelled" and row["output_text"]
    await until(
        lambda: details.output.toPlainText() == row["output_text"],
        what=lambda: f"{details.output.toPlainText()!r} vs {row['output_text']!r}",
    )
