"""The quit question says what the next start will do with each unfinished task, as chapter
11's table 11.3 does it: a queued task never started, so it is not "started over"."""

from __future__ import annotations

from lmsp_desktop.core.views import TaskRow
from lmsp_desktop.gui.dialogs.quit_dialog import consequences


def row(state: str, on_restart: str) -> TaskRow:
    return TaskRow(
        n=1,
        id="resp_x",
        client="c",
        model="m",
        state=state,
        on_restart=on_restart,
        created_at=0.0,
        started_at=None,
        finished_at=None,
        last_seq=0,
        output_tokens=0,
        queue_position=None,
        error=None,
    )


def test_queued_tasks_wait_again_and_only_running_ones_start_over_or_resume() -> None:
    text = consequences(
        [
            row("running", "retry"),
            row("running", "resume"),
            row("queued", "retry"),
            row("loading", "resume"),
            row("queued", "fail"),
        ]
    )
    assert text == (
        "If you quit now, at the next start 1 will be marked failed, "
        "1 will start over from the beginning, 1 will resume where it stopped "
        "and 2 will wait in the queue again (as each task's restart policy says)."
    )


def test_tasks_being_cancelled_end_cancelled() -> None:
    only = consequences([row("cancelling", "resume")])
    assert only == "They are being cancelled and will end as cancelled."
    mixed = consequences([row("cancelling", "retry"), row("running", "fail")])
    assert "1 will be marked failed and 1 will end as cancelled" in mixed
