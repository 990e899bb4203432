"""A retried task's earlier run is read from its events once (gui/pages/earlier_run.py): a
task of thousands of events selected again reads none of them for its Output tab. A real
core (store, runner, HTTP service), a scripted upstream that cuts its stream, the real
MainWindow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.states import TERMINAL
from lmsp_desktop.core.upstreams import engine as upstream_engine
from tests.integration.gui_windows import client_token, open_app, post_background, slow_engine
from tests.support.fake_upstream import Behaviour, FakeUpstream
from tests.support.polling import until

pytestmark = pytest.mark.gui

WORDS = 3000


async def test_a_retried_task_shown_again_reads_no_events_for_its_earlier_run(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(upstream_engine, "BACKOFF_S", 0.01)
    words = [f" w{i}" for i in range(WORDS)]

    def cut_then_fail() -> list[Behaviour]:
        return [Behaviour("cut", words=words), *[Behaviour("error", status=500)] * 10]

    fake = FakeUpstream(cut_then_fail(), models=("m1",))
    url = await fake.start()
    try:
        async with open_app(qtbot, tmp_path, engine=slow_engine(3, 0.0)) as (core, window):
            await core.add_upstream("gpu", url, None, 2)
            await until(lambda: core.upstreams.engine_for("gpu/m1"), what="the upstream model")
            token = await client_token(core)
            retried = []
            for _ in range(2):  # one after the other: each gets the cut, then the 500s
                fake.script[:] = cut_then_fail()
                task_id = await post_background(core, token, model="gpu/m1", on_restart="retry")

                async def ended(task_id: str = task_id) -> bool:
                    return (await core.task(task_id))["state"] in TERMINAL

                await until(ended, limit=60, what="the retried task to end")
                retried.append(task_id)
            tasks, details = window.tasks, window.tasks.details
            events_page = details.events.page_size + 1  # how the Events tab pages them in
            # Tasks longer than one page of the Events tab, so the Output tab's reading cannot
            # hide in it. (How many events the words make depends on the machine's load: the
            # runner commits the deltas that arrived meanwhile together; 863 at load 15.)
            events = min([(await core.task(task_id))["last_seq"] for task_id in retried])
            assert events > events_page, events
            real = core.task_event_rows
            read: list[int] = []  # event rows read for anything but the Events tab's pages

            async def counted(task_id: str, after: int = 0, limit: int = 1000) -> Any:
                rows = await real(task_id, after, limit)
                if limit != events_page:
                    read.append(len(rows))
                return rows

            monkeypatch.setattr(core, "task_event_rows", counted)
            await until(lambda: all(tasks.model.row_of(t) is not None for t in retried))
            per_selection = []
            for task_id in retried * 3:  # back and forth between the two
                read.clear()
                tasks.table.selectRow(tasks.model.row_of(task_id))
                await until(
                    lambda: (
                        details.task_id == task_id  # noqa: B023
                        and "Started over 1×" in details.output.toPlainText()
                        and details.events.rowCount() > 0
                    ),
                    what="the retried task's output",
                )
                assert " w0 w1" in details.output.toPlainText()  # the discarded run's words
                per_selection.append(sum(read))
            # The first time every event, once; shown again, none (it read them all each time).
            assert all(n >= events for n in per_selection[:2]), per_selection
            assert per_selection[2:] == [0, 0, 0, 0], per_selection
    finally:
        await fake.stop()
