"""A stateful property test of the task state machine on a real store and database file.

Random creates, runner transitions, cancels, completions and crash+recover cycles, checked
against a model after every step: no illegal transition ever succeeds, sequence numbers are
gapless and unique, and each task's state is the one its last event implies.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import RECOVERY_TABLE, UNFINISHED, RestartPolicy, TaskState
from lmsp_desktop.core.storage.recovery import next_boot, recover
from lmsp_desktop.core.storage.store import Store
from tests.support.store_helpers import check_invariants, new_task

T = TypeVar("T")
S = TaskState


class TaskStoreMachine(RuleBasedStateMachine):
    tasks = Bundle("tasks")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="lmsp-hyp-"))
        self.loop = asyncio.new_event_loop()
        self.store = self._open()
        self.state: dict[str, TaskState] = {}
        self.policy: dict[str, RestartPolicy] = {}
        self.output: dict[str, str] = {}

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def _open(self) -> Store:
        # Durability is the crash test's subject; here only the rules matter, so no fsyncs.
        store = Store(self.dir, synchronous="OFF")
        self.run(store.open())
        return store

    def teardown(self) -> None:
        try:
            self.run(self.store.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def expect(self, task_id: str, ok: object, legal: set[TaskState], to: TaskState) -> None:
        before = self.state[task_id]
        assert bool(ok) == (before in legal), f"{before} -> {to} answered {ok!r}"
        if ok:
            self.state[task_id] = to

    # -- rules ---------------------------------------------------------------------------
    # Few tasks, so that the steps go deep into each task's life rather than wide.
    @precondition(lambda self: len(self.state) < 3)
    @rule(target=tasks, policy=st.sampled_from(list(RestartPolicy)), model=st.sampled_from("ab"))
    def create(self, policy: RestartPolicy, model: str) -> str:
        result = self.run(self.store.tasks.create(new_task(model=model, on_restart=policy)))
        self.state[result.task_id] = S.QUEUED
        self.policy[result.task_id] = policy
        self.output[result.task_id] = ""
        return result.task_id

    @rule(task_id=tasks)
    def mark_loading(self, task_id: str) -> None:
        ok = self.run(self.store.tasks.mark_loading(task_id))
        self.expect(task_id, ok, {S.QUEUED}, S.LOADING)

    @rule(task_id=tasks)
    def mark_running(self, task_id: str) -> None:
        ok = self.run(self.store.tasks.mark_running(task_id))
        self.expect(task_id, ok, {S.QUEUED, S.LOADING}, S.RUNNING)
        if ok:
            self.output[task_id] = ""  # a new run opens a new, empty item

    @rule(task_id=tasks, deltas=st.lists(st.text(max_size=3), min_size=1, max_size=4))
    def append_deltas(self, task_id: str, deltas: list[str]) -> None:
        ok = self.run(
            self.store.tasks.append_deltas(
                task_id,
                deltas,
                output_tokens=len(deltas),
                input_tokens=1,
                snapshot={"tokens": list(range(len(deltas)))},
            )
        )
        self.expect(task_id, ok, {S.RUNNING}, S.RUNNING)
        if ok:
            self.output[task_id] += "".join(deltas)

    @rule(task_id=tasks, incomplete=st.booleans())
    def finish(self, task_id: str, incomplete: bool) -> None:
        reason = "max_output_tokens" if incomplete else None
        ok = self.run(
            self.store.tasks.finish(
                task_id, incomplete_reason=reason, input_tokens=1, output_tokens=1
            )
        )
        self.expect(task_id, ok, {S.RUNNING}, S.INCOMPLETE if incomplete else S.COMPLETED)

    # Random operations alone rarely get a task far: most are refused or end it early. This
    # rule takes the step a runner would take next, so runs reach deep states often.
    @rule(task_id=tasks, via_loading=st.booleans())
    def progress(self, task_id: str, via_loading: bool) -> None:
        state = self.state[task_id]
        if state == S.QUEUED and via_loading:
            self.mark_loading(task_id)
        elif state in (S.QUEUED, S.LOADING):
            self.mark_running(task_id)
        elif state == S.RUNNING:
            self.append_deltas(task_id, ["tok"])
        elif state == S.CANCELLING:
            self.confirm_cancelled(task_id)

    @rule(task_id=tasks)
    def fail(self, task_id: str) -> None:
        ok = self.run(self.store.tasks.fail(task_id, "engine_error", "boom"))
        self.expect(task_id, ok, {S.QUEUED, S.LOADING, S.RUNNING}, S.FAILED)

    @rule(task_id=tasks)
    def cancel(self, task_id: str) -> None:
        before = self.state[task_id]
        try:
            row = self.run(self.store.tasks.cancel(task_id))
        except LmspError as err:
            assert before in {S.COMPLETED, S.FAILED, S.INCOMPLETE}, before
            assert (err.status, err.code) == (409, "task_not_cancellable")
            return
        expected = {
            S.QUEUED: S.CANCELLED,
            S.LOADING: S.CANCELLING,
            S.RUNNING: S.CANCELLING,
            S.CANCELLING: S.CANCELLING,
            S.CANCELLED: S.CANCELLED,
        }[before]
        assert row["state"] == expected
        self.state[task_id] = expected

    @rule(task_id=tasks)
    def confirm_cancelled(self, task_id: str) -> None:
        ok = self.run(self.store.tasks.confirm_cancelled(task_id))
        self.expect(task_id, ok, {S.CANCELLING}, S.CANCELLED)

    # A crash ends every task's run, so only one draw in four really crashes; otherwise the
    # tasks rarely live long enough to be cancelled while running.
    @rule(really=st.sampled_from([False, False, False, True]))
    def crash_and_recover(self, really: bool) -> None:
        if not really:
            return
        self.run(self.store.close())
        self.store = self._open()
        report = self.run(recover(self.store.tasks, self.run(next_boot(self.store.tasks))))
        leftovers = {t for t, s in self.state.items() if s in UNFINISHED}
        assert {i.task_id for i in report.items} == leftovers
        for item in report.items:
            before = self.state[item.task_id]
            after = RECOVERY_TABLE[(before, self.policy[item.task_id])]
            assert (item.state_before, item.state_after) == (before, after)
            self.state[item.task_id] = after
            if item.event_type == "response.queued":
                self.output[item.task_id] = ""  # retry discards the output

    # -- invariants ----------------------------------------------------------------------
    @invariant()
    def store_matches_the_model(self) -> None:
        rows = check_invariants(self.store.db.path)
        assert {t: r["state"] for t, r in rows.items()} == self.state
        assert {t: r["output_text"] for t, r in rows.items()} == self.output


TaskStoreMachine.TestCase.settings = settings(
    max_examples=50,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_task_state_machine = TaskStoreMachine.TestCase
