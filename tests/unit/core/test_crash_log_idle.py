"""CrashLog's hold rule with idle deaths (an engine process that died with no task on it):
recorded, shown, but never counted towards the two crashes within 10 minutes that hold a
model, and never pushing a task crash out of the count."""

from __future__ import annotations

from lmsp_desktop.core.crashes import HOLD_WINDOW_S, CrashLog
from lmsp_desktop.core.engines.base import EngineCrashed


def crash_at(at: float) -> EngineCrashed:
    crash = EngineCrashed("m", "SIGKILL")
    crash.at = at
    return crash


def test_idle_deaths_are_recorded_but_do_not_hold() -> None:
    log = CrashLog()
    for at in (0.0, 1.0, 2.0):
        record, new = log.record("m", crash_at(at), idle=True)
        assert new and record.idle and not record.held
    last = log.last("m")
    assert last is not None and last.at == 2.0 and last.tasks_text() == "none unfinished"
    assert "m" not in log.held


def test_two_task_crashes_hold_with_idle_deaths_between() -> None:
    log = CrashLog()
    log.record("m", crash_at(0.0))
    log.record("m", crash_at(1.0), idle=True)
    log.record("m", crash_at(2.0), idle=True)
    record, _new = log.record("m", crash_at(3.0))
    assert record.held and "m" in log.held


def test_task_crashes_further_apart_than_the_window_do_not_hold() -> None:
    log = CrashLog()
    log.record("m", crash_at(0.0))
    record, _new = log.record("m", crash_at(HOLD_WINDOW_S + 1))
    assert not record.held and "m" not in log.held
