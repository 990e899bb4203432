"""Single-task moves made at once share one unit of work (moves.py, B2), and each is still
its own compare-and-set: a cancel committed before a finish wins, a broken move fails alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.storage import moves as moves_module
from lmsp_desktop.core.storage import tasks as task_store_module
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.views import TaskChange
from tests.support.store_helpers import check_invariants, drive, event_types


async def finish(store: Store, task_id: str) -> bool:
    return await store.tasks.finish(
        task_id, incomplete_reason=None, input_tokens=3, output_tokens=2
    )


async def test_finishes_made_together_commit_together_and_a_cancel_before_them_wins(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = [await drive(store.tasks, TaskState.RUNNING) for _ in range(6)]
    cancelled = running[1::3]
    for task_id in cancelled:
        await store.tasks.cancel(task_id)
    applied: list[int] = []
    real = moves_module.apply_moves
    monkeypatch.setattr(
        moves_module,
        "apply_moves",
        lambda conn, moves: applied.append(len(moves)) or real(conn, moves),
    )
    heard: list[TaskChange] = []
    store.tasks.listeners.append(heard.append)

    done = await asyncio.gather(*(finish(store, task_id) for task_id in running))

    assert applied == [6]  # one set of statements for the six moves
    assert done == [task_id not in cancelled for task_id in running]
    rows = check_invariants(store.db.path)  # gapless logs, legal moves, state = last event
    for task_id in running:
        if task_id in cancelled:  # the cancel's state and log, untouched by the finish
            assert rows[task_id]["state"] == TaskState.CANCELLING
            assert event_types(store.db.path, task_id)[-1] == "response.cancelling"
        else:
            assert rows[task_id]["state"] == TaskState.COMPLETED
            assert event_types(store.db.path, task_id)[-1] == "response.completed"
    # Listeners hear each committed finish once, with its last sequence number.
    assert {(c.task_id, c.last_seq) for c in heard} == {
        (t, rows[t]["last_seq"]) for t in running if t not in cancelled
    }


async def test_a_move_that_breaks_fails_alone(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = [await drive(store.tasks, TaskState.RUNNING) for _ in range(3)]
    broken = running[1]
    real = task_store_module.closing_with

    def closing_with(event_type: Any) -> Any:
        events = real(event_type)

        def built(row: Any) -> Any:
            if row["id"] == broken:
                raise ValueError("a bug in one task's events")
            return events(row)

        return built

    monkeypatch.setattr(task_store_module, "closing_with", closing_with)
    outcomes = await asyncio.gather(
        *(finish(store, task_id) for task_id in running), return_exceptions=True
    )

    assert outcomes[0] is True and outcomes[2] is True
    assert isinstance(outcomes[1], ValueError)
    rows = check_invariants(store.db.path)
    assert rows[broken]["state"] == TaskState.RUNNING  # nothing of its move was written
    assert [rows[t]["state"] for t in running[::2]] == [TaskState.COMPLETED] * 2
