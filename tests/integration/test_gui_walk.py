"""The third walk through the window (issue 24): what is on screen matches the task shown, the
state filters and status messages keep up, and failures explain themselves. A real core
(store, runner, HTTP service) with a scripted engine, and the real MainWindow."""

from __future__ import annotations

import asyncio
import time
import types
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication, QImage, QTextDocumentFragment
from PySide6.QtWidgets import QMessageBox, QWidget

from lmsp_desktop.core.engines.base import EngineError
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.upstreams import engine as upstream_engine
from lmsp_desktop.gui.data import STATE_FILTERS
from lmsp_desktop.gui.models.model_table import Role as ModelRole
from lmsp_desktop.gui.models.task_table import COL_CLIENT, COL_ID
from tests.integration.gui_windows import (
    MODEL,
    client_token,
    open_app,
    post_background,
    slow_engine,
)
from tests.support.fake_upstream import Behaviour, FakeUpstream
from tests.support.polling import until

pytestmark = pytest.mark.gui


def on_screen(widget: QWidget) -> QImage:
    """What the window's backing store holds for `widget`: what a user sees, as painted so
    far (unlike widget.grab(), which paints afresh)."""
    corner = widget.mapTo(widget.window(), QPoint(0, 0))
    screen = QGuiApplication.primaryScreen()
    shot = screen.grabWindow(
        widget.window().winId(), corner.x(), corner.y(), widget.width(), widget.height()
    )
    return shot.toImage()


async def test_the_output_tab_on_screen_is_the_shown_tasks_own(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        tasks, details = window.tasks, window.tasks.details
        token = await client_token(core)
        # Four run at once (parallel_per_model); the last two wait in the queue.
        posted = [await post_background(core, token) for _ in range(6)]
        waiting = posted[-2:]
        await until(lambda: tasks.model.rowCount() == 6, what="six rows")
        viewport = details.output.viewport()

        def shows(task_id: str, words: str) -> Any:
            def check() -> bool:
                return (
                    details.task_id == task_id
                    and words in details.output.placeholderText()
                    and on_screen(viewport) == viewport.grab().toImage()
                )

            return until(check, what=f"{task_id}'s own sentence on screen: {words!r}")

        tasks.table.selectRow(tasks.model.row_of(waiting[-1]))
        await shows(waiting[-1], "Waiting in the queue")
        await core.cancel(waiting[-1])  # its state changes while it is shown
        await shows(waiting[-1], "cancelled while it waited in the queue")
        tasks.table.selectRow(tasks.model.row_of(waiting[0]))  # another task, another reason
        await shows(waiting[0], "Waiting in the queue")


async def test_active_filter_lets_go_of_a_task_once_it_is_cancelled(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        tasks = window.tasks
        token = await client_token(core)
        running = await post_background(core, token)
        waiting = await post_background(core, token)
        await until(lambda: tasks.model.rowCount() == 2, what="two rows")
        qtbot.mouseClick(tasks.chips.button(list(STATE_FILTERS).index("Active")), Qt.LeftButton)
        await until(lambda: tasks.model.filter.states, what="the Active filter applied")
        await core.cancel(waiting)
        await until(lambda: tasks.model.row_of(waiting) is None, what="the cancelled row gone")
        assert tasks.model.row_of(running) is not None


async def test_a_failure_says_why_in_the_details_header_and_its_event(
    qtbot: Any, tmp_path: Path
) -> None:
    message = "The fake engine ran out of fake memory."
    engine = FakeEngine(["a", "b"], fail_at=1, fail_error=EngineError("engine_error", message))
    async with open_app(qtbot, tmp_path, engine=engine) as (core, window):
        tasks, details = window.tasks, window.tasks.details
        task_id = await post_background(core, await client_token(core))
        await until(lambda: tasks.model.row_of(task_id) is not None, what="its row")
        tasks.table.selectRow(tasks.model.row_of(task_id))
        await until(lambda: details.state == "failed", what="the task failed")
        assert message in details.header.text()

        def last_event() -> str:  # the failed event is the last row once it is read
            rows = details.events.rowCount()
            return str(details.events.index(rows - 1, 3).data()) if rows else ""

        await until(
            lambda: message in last_event(), what=lambda: f"its failed event: {last_event()}"
        )


async def test_status_messages_are_seen_and_a_fresh_folder_says_it_has_no_report(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (_, window):
        window.resize(900, 600)
        window.status.copy_url()
        await until(
            lambda: window.status.message.shown_text() == "URL copied ✓",  # whole, at 900 px
            what=lambda: f"'Copied …' in the status bar: {window.status.message.shown_text()!r}",
        )
        await window.open_last_report()
        box = window.dialog
        assert isinstance(box, QMessageBox) and box.isVisible()
        assert "no recovery report" in box.text().lower()


async def test_the_sort_arrow_points_down_while_the_newest_task_is_on_top(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        tasks = window.tasks
        token = await client_token(core)
        older = await post_background(core, token)
        newer = await post_background(core, token)
        await until(lambda: tasks.model.rowCount() == 2, what="two rows")
        header = tasks.table.horizontalHeader()
        # QHeaderView draws AscendingOrder as ▼ (QStyleOptionHeader.SortDown).
        assert header.sortIndicatorOrder() == Qt.SortOrder.AscendingOrder
        assert tasks.model.task_id(0) == newer
        qtbot.mouseClick(
            header.viewport(),
            Qt.MouseButton.LeftButton,
            pos=header.viewport().rect().topLeft()
            + QPoint(header.sectionViewportPosition(header.sortIndicatorSection()) + 5, 5),
        )
        await until(lambda: tasks.model.task_id(0) == older, what="oldest first after a click")
        assert header.sortIndicatorOrder() == Qt.SortOrder.DescendingOrder  # drawn ▲


async def test_upstream_servers_tab_fills_the_tab_says_when_changes_apply_and_titles_fit(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        await core.add_upstream("gpu", "http://127.0.0.1:9/v1", None, 2)  # nobody listens
        window.open_settings()
        settings = window.dialog
        section = settings.upstreams
        settings.tabs.setCurrentWidget(section)
        await until(lambda: section.table.rowCount() == 1, what="the upstream listed")
        await until(lambda: section.table.isVisible(), what="the tab shown")
        # The table fills the tab instead of floating 120 px tall in its middle...
        assert section.table.height() >= section.height() * 0.6, section.table.height()
        # ...its cells are whole or say the rest on hover (the URL), never "✗ down: cannot …".
        status = section.table.item(0, 2)
        assert status.text() == "✗ down" and status.toolTip()
        assert section.table.item(0, 1).toolTip() == "http://127.0.0.1:9/v1"
        # Add and Remove apply at once, unlike the rest of the dialog: it says so.
        assert "take effect at once" in section.note.text() and "Cancel" in section.note.text()
        section._ask()
        add = section.dialog
        assert add is not None
        add.show()
        await until(add.isVisible, what="Add an upstream server")
        title = add.windowTitle()
        assert add.width() >= add.fontMetrics().horizontalAdvance(title) + 100, title
        add.reject()
        settings.reject()


@pytest.mark.qt_log_ignore("does not support QPlatformServices::openDocument")
async def test_open_folder_without_a_file_manager_says_where_the_folder_is(
    qtbot: Any, tmp_path: Path
) -> None:
    # Offscreen, as on a server without a desktop, no file manager can open a folder.
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (_, window):
        window.nav.setCurrentRow(1)
        models = window.models
        await until(lambda: models.model.rowCount() >= 1, what="the demo model listed")
        models.table.selectRow(0)
        qtbot.mouseClick(models.open_button, Qt.MouseButton.LeftButton)
        folder = str(Path(models.model.index(0, 0).data(ModelRole.PATH)).parent)
        assert folder in models.status.text() and "No file manager" in models.status.text()
        assert QGuiApplication.clipboard().text() == folder


async def test_clients_page_lines_tell_the_last_answer_and_let_go_of_expired_requests(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lmsp_desktop.gui.pages import clients_page

    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        page = window.clients
        window.nav.setCurrentRow(2)
        await core.pairing.start("Laptop A", frozenset({"models:read"}), "10.0.0.7")
        await until(lambda: len(page.cards) == 1, what="Laptop A's card")
        await page.answer("approve", page.cards[0].request, ["models:read"])
        assert page.notice.text().startswith("Approved Laptop A")
        await core.pairing.start("Laptop B", frozenset({"models:read"}), "10.0.0.8")
        await until(lambda: len(page.cards) == 1, what="Laptop B's card")
        await page.answer("deny", page.cards[0].request, [])
        assert page.notice.text().startswith("Denied Laptop B")  # not "Approved Laptop A"

        await core.pairing.start("spam-bot", frozenset({"models:read"}), "10.0.0.9")
        await until(lambda: len(page.cards) == 1, what="spam-bot's card")
        await page.answer("ignore", page.cards[0].request, [])
        await until(lambda: page.ignored_note.isVisibleTo(page), what="the ignored note")
        # Its request runs out; nothing announces that, the page's clock notices.
        later = core.pairing.expires_in + 1
        core.pairing.clock = lambda: time.time() + later
        monkeypatch.setattr(
            clients_page,
            "time",
            types.SimpleNamespace(time=lambda: time.time() + later, monotonic=time.monotonic),
        )
        await until(lambda: not page.ignored_note.isVisibleTo(page), what="the note gone")


async def test_a_narrow_window_lets_the_least_useful_task_columns_go_first(
    qtbot: Any, tmp_path: Path
) -> None:
    """At 900 px On restart and Created step aside (the details header has both); narrower,
    the long client's name is cut before Duration (a download's time left) or the speed go,
    and the Id keeps at least its distinguishing end."""
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        tasks = window.tasks
        token = await client_token(core, "a-client-with-a-long-name")
        task_id = await post_background(core, token)
        await until(lambda: tasks.model.row_of(task_id) is not None, what="its row")
        header = tasks.table.horizontalHeader()

        def shown() -> list[str]:
            return [
                tasks.model.headerData(c, Qt.Orientation.Horizontal)
                for c in range(header.count())
                if not header.isSectionHidden(c)
            ]

        window.resize(900, 600)
        keep = ["Id", "Client", "Model", "State", "Duration", "Output", "Speed"]
        await until(
            lambda: shown() == keep and tasks.table.horizontalScrollBar().maximum() == 0,
            what=lambda: f"{keep} at 900 px, shown: {shown()}",
        )
        # Narrower still: the long client's name is cut first; the Id keeps at least its end
        # ("…8f2a91c0"; it was cut to "dl_......4cb8"); Duration stays.
        window.resize(760, 600)
        row = tasks.model.row_of(task_id)
        assert row is not None
        clients = tasks.table.sizeHintForColumn(COL_CLIENT)
        id_end = tasks.fontMetrics().horizontalAdvance("…00000000") + 8
        await until(
            lambda: "Duration" in shown() and header.sectionSize(COL_CLIENT) < clients,
            what=lambda: f"the Client narrowed, Duration kept: {shown()}",
        )
        assert header.sectionSize(COL_ID) >= id_end


async def test_a_failed_upstream_tasks_header_keeps_two_lines_and_the_tabs_in_place(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upstream that answers 500 with a long reason: its task fails, and the details
    header still takes two lines at 900 px (it wrapped to three and pushed the tabs down),
    the reason on the second, whole in the tooltip."""
    monkeypatch.setattr(upstream_engine, "BACKOFF_S", 0.01)  # its retries, quickly
    reason = "CUDA out of memory while allocating the KV cache of every sequence " * 2
    fake = FakeUpstream(
        [Behaviour("error", status=500, message=reason)] * 10,
        models=("qwen2.5-coder-7b-instruct-q4_k_m",),
    )
    url = await fake.start()
    try:
        async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
            window.resize(900, 600)
            await core.add_upstream("lab-gpu-box", url, None, 2)
            model = "lab-gpu-box/qwen2.5-coder-7b-instruct-q4_k_m"
            await until(lambda: core.upstreams.engine_for(model), what="the upstream's model")
            tasks, details = window.tasks, window.tasks.details
            done = await post_background(core, await client_token(core), model=MODEL)
            failed = await post_background(core, await client_token(core, "b"), model=model)
            await until(lambda: tasks.model.row_of(done) is not None, what="the local task")
            tasks.table.selectRow(tasks.model.row_of(done))
            await until(lambda: details.task_id == done and "·" in details.header.text())
            tabs_at = details.tabs.mapTo(window, QPoint(0, 0)).y()
            await until(
                lambda: (
                    (tasks.model.task(failed) or types.SimpleNamespace(state="")).state == "failed"
                ),
                what="the upstream task failed",
            )
            window.resize(1600, 1000)  # its facts on one wide line, then narrowed again
            tasks.table.selectRow(tasks.model.row_of(failed))
            await until(lambda: details.state == "failed", what="its details")
            for _ in range(5):  # relaid out
                await asyncio.sleep(0.05)
            window.resize(900, 600)
            for _ in range(5):
                await asyncio.sleep(0.05)
            header = details.header.text()
            assert header.count("<br>") == 1 and "HTTP 500" in header.split("<br>")[1], header
            assert reason.strip() in details.header.toolTip()
            assert details.tabs.mapTo(window, QPoint(0, 0)).y() == tabs_at
            assert window.width() == 900  # a long header never widens the window
            assert window.minimumSizeHint().width() <= 900
            metrics = details.header.fontMetrics()
            for line in header.split("<br>"):
                plain = QTextDocumentFragment.fromHtml(line).toPlainText()
                assert metrics.horizontalAdvance(plain) <= details.header.width() * 1.1, plain
    finally:
        await fake.stop()


async def test_output_of_a_run_started_over_stays_on_screen_and_says_so(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Policy `retry`: the upstream cuts the stream after some words, the task starts over,
    and the new run fails (500). The words already shown stay in the Output tab, marked as
    the discarded run's, with why the task ended (they vanished when it started over)."""
    monkeypatch.setattr(upstream_engine, "BACKOFF_S", 0.01)
    words = ["Once", " upon", " a", " time"]
    fake = FakeUpstream(
        [Behaviour("cut", words=words), *[Behaviour("error", status=500)] * 10], models=("m1",)
    )
    url = await fake.start()
    try:
        async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
            await core.add_upstream("gpu", url, None, 2)
            await until(lambda: core.upstreams.engine_for("gpu/m1"), what="the upstream model")
            tasks, details = window.tasks, window.tasks.details
            token = await client_token(core)
            task_id = await post_background(core, token, model="gpu/m1", on_restart="retry")
            await until(lambda: tasks.model.row_of(task_id) is not None, what="its row")
            tasks.table.selectRow(tasks.model.row_of(task_id))
            await until(lambda: details.state == "failed", what="the task failed")
            # The discarded run's words are read from its events after the state shows (in
            # time on a quiet machine, not at load 12: wait for them instead of racing).
            await until(
                lambda: "Once upon a time" in details.output.toPlainText(),
                what=details.output.toPlainText,
            )
            shown = details.output.toPlainText()
            assert "Started over 1×" in shown and "discarded" in shown
            assert "HTTP 500" in shown and "[This run]" in shown
            assert (await core.task(task_id))["output_text"] == ""  # the answer has none
    finally:
        await fake.stop()


async def test_a_running_tasks_header_keeps_counting_while_nothing_arrives(
    qtbot: Any, tmp_path: Path
) -> None:
    """Walked: a long prompt being read sends nothing for seconds; the table's Duration
    counted on while the details header stood at 'ran 0.3 s'. The engine here writes one
    token, then holds the next until the test lets it go."""
    import re
    import threading

    engine = FakeEngine()
    engine.gate = threading.Semaphore(1)

    def ran() -> float:
        found = re.search(r"ran\s([\d.]+)\ss", details.header.text())  # \s: nbsp too
        return float(found.group(1)) if found else -1.0

    async with open_app(qtbot, tmp_path, engine=engine) as (core, window):
        tasks, details = window.tasks, window.tasks.details
        task_id = await core.submit(MODEL, "Read this long prompt.")
        try:
            await until(lambda: tasks.model.row_of(task_id) is not None, what="its row")
            tasks.table.selectRow(tasks.model.row_of(task_id))
            await until(
                lambda: details.state == "running" and ran() >= 0,
                what=lambda: (details.state, details.header.text()),
            )
            first = ran()
            await until(lambda: ran() >= first + 1.5, limit=10, what=details.header.text)
            assert (await core.task(task_id))["output_tokens"] <= 1  # nothing more arrived
        finally:
            engine.gate.release(10_000)
