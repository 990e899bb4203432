"""The tasks table model: pages, live patches, inserts at the top, filters."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.views import PromptProgress, TaskChange, TaskFilter
from lmsp_desktop.gui import data
from lmsp_desktop.gui.aio import spawn
from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.models.event_table import COL_DATA, EventTableModel
from lmsp_desktop.gui.models.task_table import (
    COL_DURATION,
    COL_STATE,
    COL_TOKENS,
    COL_TPS,
    Role,
    TaskTableModel,
)
from tests.support.polling import until
from tests.unit.gui.helpers import make_task, run_task

pytestmark = pytest.mark.gui


async def test_model_passes_qtmodeltester(qtmodeltester, store, core):
    for i in range(30):
        await make_task(store, prompt=f"p{i}")
    model = TaskTableModel(core, page_size=10)
    await model.reload()
    assert model.rowCount() == 10 and model.canFetchMore()
    qtmodeltester.check(model, force_py=True)  # also calls fetchMore; inserts are checked
    while model.canFetchMore() or model._loading:
        model.fetchMore()
        await until(lambda: not model._loading)
    assert model.rowCount() == 30


async def test_lazy_loading_pages_through_5000_tasks(store, core):
    def insert(conn):
        for i in range(5000):
            rid = f"resp_{i:06d}"
            conn.execute(
                "INSERT INTO responses (id, created_at, model, request) VALUES (?,?,?,?)",
                (rid, 1_700_000_000 + i, "m", '{"temperature":1,"top_p":1}'),
            )
            conn.execute(
                "INSERT INTO tasks (id, model, state, on_restart, mode, created_at, last_seq)"
                " VALUES (?, 'm', 'completed', 'fail', 'background', ?, 3)",
                (rid, 1_700_000_000 + i),
            )

    await store.db.run(insert)
    model = TaskTableModel(core, page_size=200)
    await model.reload()
    assert model.rowCount() == 200
    assert model.data(model.index(0, 0), Role.TASK_ID) == "resp_004999"  # newest first
    model.fetchMore()
    await until(lambda: model.rowCount() == 400, what="second page")
    assert model.data(model.index(399, 0), Role.TASK_ID) == "resp_004600"
    while model.canFetchMore() or model._loading:
        model.fetchMore()
        await until(lambda: not model._loading)
    assert model.rowCount() == 5000


async def test_commits_show_after_a_bridge_flush(store, core):
    first = await make_task(store)
    model = TaskTableModel(core)
    await model.reload()
    # The timer never fires within the test (a loaded machine could split the commits over
    # two timer periods): the flush below is the one a period's end would make.
    bridge = CoreBridge(core, interval_ms=600_000)
    flushes: list[int] = []

    def on_changes(changes):
        flushes.append(len(changes))
        spawn(model.apply_changes(changes))

    bridge.tasks_changed.connect(on_changes)
    second = await make_task(store)
    await run_task(store, first, ["Once", " upon", " a time"], finish=False)
    last_seq = (await store.tasks.get(first))["last_seq"]
    # The commits' news reaches the bridge after each commit (a loop callback): wait for all.
    await until(lambda: second in bridge._tasks and bridge._tasks[first].last_seq == last_seq)
    assert flushes == []  # nothing shown before the period ends
    bridge.flush()
    await until(lambda: model.rowCount() == 2 and model.task(first).output_tokens == 3)
    assert model.data(model.index(0, 0), Role.TASK_ID) == second  # inserted at the top
    assert model.data(model.index(1, COL_STATE)) == "running"
    assert model.data(model.index(1, COL_TOKENS)) == "3"
    assert model.data(model.index(0, COL_STATE)) == "queued #1"
    assert len(flushes) == 1  # create + running + deltas of two tasks: one coalesced flush
    await store.tasks.cancel(first)
    await until(lambda: first in bridge._tasks)
    bridge.flush()
    await until(lambda: model.task(first).state == TaskState.CANCELLING)
    assert model.data(model.index(1, COL_STATE)) == "cancelling…"
    bridge.close()


async def test_state_filter_and_text_filter_query_the_store(store, core):
    done = await make_task(store, model="gemma")
    await run_task(store, done, ["x"])
    await make_task(store, model="smollm2")
    model = TaskTableModel(core)
    await model.set_filter(TaskFilter(states=data.STATE_FILTERS["Finished"]))
    assert [model.task_id(r) for r in range(model.rowCount())] == [done]
    await model.set_filter(TaskFilter(text="smol"))
    assert model.rowCount() == 1 and model.task(done) is None


async def test_event_model_passes_qtmodeltester_and_grows_at_the_tail(qtmodeltester, store, core):
    task_id = await make_task(store)
    await run_task(store, task_id, [f"t{i}" for i in range(30)], finish=False)
    model = EventTableModel(core, page_size=10)
    await model.show_task(task_id)
    assert model.rowCount() == 10 and model.canFetchMore()
    qtmodeltester.check(model, force_py=True)
    while model.canFetchMore() or model._loading:
        model.fetchMore()
        await until(lambda: not model._loading)
    assert model.rowCount() == 34
    await store.tasks.append_deltas(
        task_id, ["more"], output_tokens=31, input_tokens=1, snapshot=None
    )
    await model.follow(35)
    assert model.rowCount() == 35
    assert model.index(34, COL_DATA).data() == "'more'"


def test_ids_of_every_api_shorten_alike():
    """The Id column keeps one width: chat completions' `chatcmpl-…` ids widened it while
    `resp_…` ids were cut (issue 24 item 21)."""
    from lmsp_desktop.gui.format import short_id

    assert short_id("resp_aabbccdd8f2a91c0") == "resp_…8f2a91c0"
    assert short_id("chatcmpl-aabbccddeeff8f2a91c0") == "chatcmpl-…8f2a91c0"
    assert short_id("resp_abc") == "resp_abc"


async def test_the_id_column_tells_apart_tasks_made_in_the_same_millisecond(
    store, core, monkeypatch
):
    """Ids start with their creation time (core/ids.py), the same for every task made at
    once: the Id column shows their random end, so each row still reads differently."""
    from lmsp_desktop.core import ids
    from lmsp_desktop.gui.models.task_table import COL_ID

    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_764_000_000_000 * 1_000_000)
    made = {await make_task(store, prompt=f"p{i}") for i in range(40)}
    model = TaskTableModel(core, page_size=100)
    await model.reload()
    assert {model.data(model.index(r, 0), Role.TASK_ID) for r in range(40)} == made
    shown = {model.index(r, COL_ID).data() for r in range(40)}
    assert len(shown) == 40


async def test_a_running_tasks_output_cell_shows_its_prompt_read_until_output(store, core):
    """While the core says a running task waits behind another's prompt read, its Output
    cell says so; once its own read begins, how far, on a bar, and the clock's tick repaints
    it as the read moves; then its tokens."""
    task_id = await make_task(store)
    await store.tasks.mark_running(task_id)
    model = TaskTableModel(core)
    await model.reload()
    cell = model.index(0, COL_TOKENS)
    assert model.data(cell) == "0"
    # Behind another task's prompt read: it waits, no bar (nothing of it is being read).
    core.prompt_reads[task_id] = PromptProgress(total=8192, cached=0, processed=0, waiting=True)
    model.tick()
    assert model.data(cell) == "waiting"  # short: the column keeps its width (the tip says)
    assert model.data(cell, Role.PROGRESS) is None
    tip = model.data(cell, Qt.ItemDataRole.ToolTipRole)
    assert "behind another task's prompt read" in tip and "8,192 tokens" in tip
    # Its own read has begun.
    core.prompt_reads[task_id] = PromptProgress(total=8192, cached=512, processed=3072)
    repainted: list[tuple[int, int]] = []
    model.dataChanged.connect(lambda top, bottom, *_: repainted.append((top.row(), top.column())))
    model.tick()
    assert (0, COL_DURATION) in repainted  # the tick's range covers Duration..Speed
    assert model.data(cell) == "37%"  # on the bar, as short as a token count
    assert model.data(cell, Role.PROGRESS) == 3072 / 8192
    tip = model.data(cell, Qt.ItemDataRole.ToolTipRole)
    assert "8,192 tokens (3,072 read so far), 512 of them reused" in tip
    # Output has begun: the runner forgets the read, the cell counts tokens again.
    del core.prompt_reads[task_id]
    await run_task(store, task_id, ["Once", " upon"], finish=False)
    row = await store.tasks.get(task_id)
    change = TaskChange(task_id, TaskState(row["state"]), row["last_seq"], row["model"])
    await model.apply_changes({task_id: change})
    assert model.data(cell) == "2" and model.data(cell, Role.PROGRESS) is None


async def test_a_resumed_tasks_output_cell_says_it_resumes_not_a_read_figure(store, core):
    """A task resumed after a restart has output already: while the engine reads its prompt
    and its earlier tokens again, its Output cell says "resuming" (the CLI's word), not the
    prompt read's "0%" that stood there until its next token; the tooltip says why."""
    task_id = await make_task(store)
    await run_task(store, task_id, ["Once", " upon"], finish=False)  # 2 tokens made before
    model = TaskTableModel(core)
    await model.reload()
    cell = model.index(0, COL_TOKENS)
    core.prompt_reads[task_id] = PromptProgress(total=41, cached=0, processed=0, waiting=True)
    model.tick()
    assert model.data(cell) == "waiting"
    assert "waits to resume" in model.data(cell, Qt.ItemDataRole.ToolTipRole)
    core.prompt_reads[task_id] = PromptProgress(total=41, cached=0, processed=41)
    model.tick()
    assert model.data(cell) == "resuming"
    tip = model.data(cell, Qt.ItemDataRole.ToolTipRole)
    assert "resumes" in tip and "the 2 tokens it made before" in tip


async def test_a_running_tasks_speed_counts_from_the_runners_first_token(store, core):
    """A running task's Speed is its generation's, from the first token the runner reports
    (the store has it only at the end), and the tooltip says the time to first token."""
    task_id = await make_task(store)
    await run_task(store, task_id, ["Once", " upon"], finish=False)  # 2 tokens, 5 input
    started = (await store.tasks.get(task_id))["started_at"] - 100.0  # a read of 90 s
    await store.db.run(
        lambda conn: conn.execute("UPDATE tasks SET started_at=? WHERE id=?", (started, task_id))
    )
    core.first_tokens[task_id] = started + 90.0
    model = TaskTableModel(core)
    await model.reload()
    cell = model.index(0, COL_TPS)
    before = time.time()
    shown = float(model.data(cell).removesuffix(" tok/s"))
    after = time.time()
    # 2 tokens in the ~10 s since the first one, not over the 100 s run (0.0 tok/s).
    assert round(2 / (after - started - 90.0), 1) <= shown <= round(2 / (before - started - 90), 1)
    tip = model.data(cell, Qt.ItemDataRole.ToolTipRole)
    assert "Generation: 2 tokens in" in tip and "Time to first token: 1 min 30 s" in tip
    assert "the prompt's 5 tokens read at 0.1 tok/s" in tip
    # Not known (a task of an older version, or before it is reported): the run's figure.
    del core.first_tokens[task_id]
    assert model.data(cell) == "0.0 tok/s"
    assert "not known" in model.data(cell, Qt.ItemDataRole.ToolTipRole)
