"""The Speed column is the generation's rate, from the first output token, never one that
counts the prompt's read (a 6k-token prompt read for 86.5 s, then 30 tokens in 1.4 s showed
0.3 tok/s): the speeds told from a task's first token time, and the time to first token."""

from __future__ import annotations

from typing import Any

import pytest

from lmsp_desktop.core.views import TaskRow
from lmsp_desktop.gui.models.task_table import speed, speed_tip


def walked(**changes: Any) -> TaskRow:
    """The user's walk: a 6,000-token prompt read for 86.5 s, then 30 tokens in 1.4 s."""
    values: dict[str, Any] = {
        "n": 1,
        "id": "resp_walk",
        "client": "desktop",
        "model": "m",
        "state": "incomplete",
        "on_restart": "fail",
        "created_at": 999.0,
        "started_at": 1000.0,
        "finished_at": 1087.9,
        "last_seq": 40,
        "output_tokens": 30,
        "queue_position": None,
        "error": None,
        "first_token_at": 1086.5,
        "input_tokens": 6000,
    }
    return TaskRow(**{**values, **changes})


def test_the_speed_is_the_tokens_over_the_time_since_the_first_one() -> None:
    row = walked()
    assert row.tokens_per_second() == pytest.approx(30 / 1.4)  # 21.4, not 0.3
    assert speed(row) == pytest.approx(30 / 1.4)
    waited, read_speed = row.prompt_read() or (None, None)
    assert waited == pytest.approx(86.5) and read_speed == pytest.approx(6000 / 86.5)
    tip = speed_tip(row)
    assert tip is not None
    assert "Generation: 30 tokens in 1.4 s since the first token" in tip
    assert "Time to first token: 1 min 26 s" in tip
    assert "the prompt's 6,000 tokens read at 69.4 tok/s" in tip


def test_without_a_first_token_time_the_old_figure_stays_and_the_tooltip_says_so() -> None:
    row = walked(first_token_at=None)  # stored before it was kept, or a kill -9
    assert speed(row) == pytest.approx(30 / 87.9)
    tip = speed_tip(row)
    assert tip is not None and "the prompt's read included" in tip and "not known" in tip


def test_a_running_task_counts_from_the_runners_first_token() -> None:
    row = walked(state="running", finished_at=None, first_token_at=None)
    assert row.tokens_per_second(now=1090.5, first_token_at=1086.5) == pytest.approx(30 / 4)
    assert row.tokens_per_second(now=1090.5) == pytest.approx(30 / 90.5)  # not known yet
    # Before its first token: no speed, whatever the time.
    reading = walked(state="running", finished_at=None, first_token_at=None, output_tokens=0)
    assert reading.tokens_per_second(now=1050.0) is None


def test_a_resumed_run_counts_its_own_tokens_from_its_own_first_token() -> None:
    row = walked(resumed_at=2000.0, resumed_tokens=10, first_token_at=2030.0, finished_at=2032.0)
    assert row.tokens_per_second() == pytest.approx(20 / 2.0)
    waited, _ = row.prompt_read() or (None, None)
    assert waited == pytest.approx(30.0)  # from the resume, not the first start
    tip = speed_tip(row)
    assert tip is not None and "20 tokens since, not counting the 10" in tip
    assert "Generation: 20 tokens in 2.0 s" in tip


def test_a_task_ended_by_the_restart_keeps_its_measure_to_its_last_event() -> None:
    row = walked(ended_by_restart=True, ran_until=1010.0, state="failed", first_token_at=None)
    assert speed(row, first_token_at=1005.0) == pytest.approx(30 / 10.0)
    assert "Ended by the restart" in (speed_tip(row) or "")
