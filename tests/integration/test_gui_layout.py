"""The window works from 900x600 up (issue 16): nothing scrolls sideways, nothing it keeps is
cut, and the sidebar tells what a glance should. A real core (store, runner, registry with the
demo model, HTTP service) and its real window; a scripted engine keeps tasks running."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PySide6.QtCore import QRect, QSettings, Qt
from PySide6.QtGui import QGuiApplication, QStandardItemModel
from PySide6.QtWidgets import QHeaderView, QLabel, QPushButton, QTableView

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.states import TaskState
from lmsp_desktop.core.views import TaskChange
from lmsp_desktop.gui import main_window
from lmsp_desktop.gui.dialogs.quit_dialog import QuitDialog
from lmsp_desktop.gui.main_window import MainWindow
from lmsp_desktop.gui.models.client_table import COL_NAME as CLIENT_NAME
from lmsp_desktop.gui.models.client_table import COL_SCOPES as CLIENT_SCOPES
from lmsp_desktop.gui.models.client_table import COL_SEEN as CLIENT_SEEN
from lmsp_desktop.gui.models.client_table import COL_TOKEN as CLIENT_TOKEN
from lmsp_desktop.gui.models.event_table import COL_DATA as COL_EVENT_DATA
from lmsp_desktop.gui.models.event_table import COL_TYPE as COL_EVENT_TYPE
from lmsp_desktop.gui.models.model_table import (
    COL_CONTEXT,
    COL_FOLDER,
    COL_LOADED,
    COL_NAME,
    COL_QUANT,
    COL_STATUS,
)
from lmsp_desktop.gui.models.task_table import (
    COL_CLIENT,
    COL_ID,
    COL_MODEL,
    COL_STATE,
    COL_TOKENS,
)
from lmsp_desktop.gui.pages.sidebar import ended_line
from tests.integration.gui_windows import (
    MODEL,
    client_token,
    open_app,
    post_background,
    slow_engine,
)
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def settle(window: MainWindow) -> None:
    """Let other resizes, fits and repaints run (the loop is Qt's: sleeping runs them; never
    processEvents() here, a nested loop that drops asyncio work)."""
    for _ in range(5):
        await asyncio.sleep(0.05)


def text_fits(table: QTableView, row: int, col: int) -> bool:
    """The cell shows its whole text (no "…"): its section is as wide as the content."""
    header = table.horizontalHeader()
    return not header.isSectionHidden(col) and header.sectionSize(col) >= table.sizeHintForColumn(
        col
    )


def fits_sideways(table: QTableView) -> bool:
    header = table.horizontalHeader()
    shown = sum(
        header.sectionSize(c) for c in range(header.count()) if not header.isSectionHidden(c)
    )
    return shown <= table.viewport().width() and table.horizontalScrollBar().maximum() == 0


def buttons_uncut(widget: Any) -> list[str]:
    """Texts of visible buttons too narrow for their text (a button clips, never elides)."""
    return [
        b.text()
        for b in widget.findChildren(QPushButton)
        if b.isVisible() and b.width() < b.fontMetrics().horizontalAdvance(b.text()) + 8
    ]


async def test_every_page_fits_900x600_and_keeps_its_useful_columns_whole(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        task_id = await post_background(core, await client_token(core, "notebook-ana"))
        tasks = window.tasks
        await until(lambda: tasks.model.row_of(task_id) is not None, what="the task's row")
        await until(lambda: window.models.model.rowCount() == 1, what="the demo model listed")

        window.resize(900, 600)
        await settle(window)
        assert (window.width(), window.height()) == (900, 600)  # not held wider by a page

        # Tasks: no sideways scrolling; Id, client, the whole model name, state and tokens.
        row = tasks.model.row_of(task_id)
        assert row is not None
        kept = (COL_ID, COL_CLIENT, COL_MODEL, COL_STATE, COL_TOKENS)

        def whole(col: int) -> bool:  # the Id whole in its short form at least ("resp_…")
            if col != COL_ID:
                return text_fits(tasks.table, row, col)
            header = tasks.table.horizontalHeader()
            return header.sectionSize(col) >= tasks.fitter.content_width(col)

        def cut() -> list[str]:  # refits follow the running task's changes within a moment
            return [tasks.model.headerData(c, Qt.Horizontal) for c in kept if not whole(c)]

        await until(
            lambda: fits_sideways(tasks.table) and not cut(),
            what=lambda: f"the tasks table fitting 900 px, whole: cut {cut()}",
        )
        assert tasks.model.index(row, COL_MODEL).data() == MODEL
        assert tasks.search.width() >= 120 and not buttons_uncut(tasks)

        # Models: no sideways scrolling; Name, Status and Loaded whole; Folder elided.
        window.nav.setCurrentRow(1)
        await settle(window)
        models = window.models
        assert fits_sideways(models.table)
        for col in (COL_NAME, COL_STATUS, COL_LOADED):
            assert text_fits(models.table, 0, col), col
        # What a GGUF user compares stays; the Digest and Location go first for it.
        for col in (COL_QUANT, COL_CONTEXT):
            assert not models.table.horizontalHeader().isSectionHidden(col), col
        assert not buttons_uncut(models)

        # Clients: one line per client, Name, Last seen and the token prefix whole.
        window.nav.setCurrentRow(2)
        clients = window.clients
        await clients.load()  # made in the store directly: nobody announced it
        assert clients.model.rowCount() == 1
        # A pairing request waiting: the Clients row says so, whole in the narrow sidebar.
        await core.pairing.start("Ana's laptop", frozenset({"models:read"}), "192.168.1.23")
        await until(lambda: "waiting" in window.nav.item(2).text(), what="the waiting request")
        nav = window.nav
        room = nav.viewport().width() - max(nav.iconSize().width(), 16) - 12
        assert nav.fontMetrics().horizontalAdvance(nav.item(2).text()) <= room, nav.item(2).text()

        await settle(window)
        assert not buttons_uncut(clients) and fits_sideways(clients.table)
        for col in (CLIENT_NAME, CLIENT_SEEN, CLIENT_TOKEN):
            assert text_fits(clients.table, 0, col), col
        scopes = clients.model.index(0, CLIENT_SCOPES)
        assert scopes.data(Qt.ItemDataRole.ToolTipRole) == scopes.data()  # whole on hover

        # At 1600x1000 every column is back, whole.
        window.resize(1600, 1000)
        window.nav.setCurrentRow(0)
        await settle(window)
        await until(
            lambda: not tasks.fitter.hidden_columns(), what="all task columns shown at 1600 px"
        )
        window.nav.setCurrentRow(1)
        await settle(window)
        assert not models.fitter.hidden_columns()
        assert fits_sideways(models.table)
        window.nav.setCurrentRow(2)
        await settle(window)
        assert not clients.fitter.hidden_columns() and text_fits(clients.table, 0, CLIENT_TOKEN)


async def test_a_header_saved_by_an_older_version_does_not_break_the_tasks_table(
    qtbot: Any, tmp_path: Path
) -> None:
    """Restoring a saved header of ten columns into this nine-column table crashed Qt at
    show (and modes saved by an older layout undid the fitting): it is no longer restored."""
    ini = tmp_path / "gui.ini"
    old = QTableView()
    old.setModel(QStandardItemModel(0, 10))
    old.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    old.horizontalHeader().resizeSection(0, 400)
    settings = QSettings(str(ini), QSettings.Format.IniFormat)
    settings.setValue("tasks/columns", old.horizontalHeader().saveState())
    settings.sync()
    async with open_app(qtbot, tmp_path / "data", ini=ini, engine=slow_engine()) as (_, window):
        window.resize(900, 600)
        await settle(window)
        assert window.isVisible()
        assert fits_sideways(window.tasks.table)


async def test_sidebar_shows_service_counts_loaded_models_and_recent_tasks(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        side = window.sidebar
        host_port = core.url.removeprefix("http://")
        assert "Serving" in side.service.text() and side.address.text() == host_port
        qtbot.mouseClick(side.copy_button, Qt.MouseButton.LeftButton)
        assert QGuiApplication.clipboard().text() == f"{core.url}/v1"
        assert side.counts.text() == "No tasks yet"
        assert side.loaded.text().startswith("None")

        token = await client_token(core)
        running = await post_background(core, token)
        other = await post_background(core, token)
        await until(lambda: "2 running" in side.counts.text(), what=side.counts.text)
        await until(lambda: MODEL in side.loaded.text(), what="the loaded model")
        assert "MiB" in side.loaded.text()
        # Each line whole in the sidebar, also the longest countdown; the name never wraps.
        side.set_loaded([(MODEL, 98_000_000, "unloads in 59 min")])
        metrics = side.loaded.fontMetrics()
        lines = [re.sub("<[^>]+>", "", line) for line in side.loaded.text().split("<br>")]
        assert lines[0] == MODEL and len(lines) == 3, lines
        for line in lines[1:]:
            assert metrics.horizontalAdvance(line) <= side.loaded.width(), line
        assert side.loaded.heightForWidth(side.loaded.width()) < 4 * metrics.lineSpacing()

        # A task that ends goes on top of Recent; a click shows it in Tasks.
        await core.cancel(other)
        await until(lambda: side.recent.count() == 1, what="the cancelled task in Recent")
        # A time ago, not a duration ("cancelled · 0s" beside the table's "10.5 s").
        assert re.fullmatch(r"cancelled \d+s ago", side.recent_texts()[0].split("\n")[1])
        room = side.recent.viewport().width() - side.recent.iconSize().width() - 12
        widest = ended_line("incomplete", 59 * 60)  # the longest word and time a line can have
        for line in [*side.recent_texts()[0].split("\n"), widest]:  # whole in the sidebar
            assert side.recent.fontMetrics().horizontalAdvance(line) <= room, line
        await until(lambda: "1 cancelled" in side.counts.text(), what=side.counts.text)
        assert "1 running" in side.counts.text()
        window.nav.setCurrentRow(2)
        item = side.recent.item(0)
        rect = side.recent.visualItemRect(item)
        qtbot.mouseClick(side.recent.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        assert window.pages.currentWidget() is window.tasks
        await until(lambda: window.tasks.selected_ids() == [other], what="the task selected")

        # Pause new work: the service refuses new tasks and the sidebar says so.
        qtbot.mouseClick(side.pause_button, Qt.MouseButton.LeftButton)
        assert core.paused and "Paused" in side.service.text()
        async with (
            aiohttp.ClientSession(core.url) as http,
            http.post(
                "/v1/responses",
                json={"model": MODEL, "input": "Hi", "background": True},
                headers={"Authorization": f"Bearer {token}"},
            ) as answer,
        ):
            assert answer.status == 503
        qtbot.mouseClick(side.pause_button, Qt.MouseButton.LeftButton)
        assert not core.paused and "Serving" in side.service.text()
        await core.cancel(running)


async def test_two_model_folders_with_the_same_end_read_differently_at_900_px(
    qtbot: Any, tmp_path: Path
) -> None:
    """Folder elides in its middle but keeps the part that tells two folders apart; its
    tooltip has the full path; Name and Loaded are cut no further than their least."""
    demo = demo_model_path()
    assert demo is not None
    folders = []
    for owner, name in (("ana", "alpha.Q4_1.gguf"), ("ben", "beta.Q4_1.gguf")):
        folder = tmp_path / "shared-drive" / owner / "llm" / "models"
        folder.mkdir(parents=True)
        os.link(demo, folder / name)
        folders.append(folder)
    async with open_app(qtbot, tmp_path / "data", engine=slow_engine(), model_dirs=folders) as (
        _,
        window,
    ):
        window.resize(900, 600)
        window.nav.setCurrentRow(1)
        models = window.models
        await until(lambda: models.model.rowCount() == 3, what="the demo model and both copies")
        # Location goes early for room at 900 px: asked for, it is kept, others giving way.
        models.set_column_wanted(COL_FOLDER, True)
        await settle(window)
        assert fits_sideways(models.table)
        width = models.table.horizontalHeader().sectionSize(COL_FOLDER)
        shown = {}
        for row in range(models.model.rowCount()):
            index = models.model.index(row, COL_FOLDER)
            shown[models.model.model_id(row)] = models.folder_delegate.shown_text(index, width)
            header = models.table.horizontalHeader()
            assert header.sectionSize(COL_NAME) >= min(
                models.name_least, models.table.sizeHintForColumn(COL_NAME)
            )
            assert text_fits(models.table, row, COL_LOADED)
        assert len(set(shown.values())) == 3, shown
        alpha, beta = shown["alpha.q4_1"], shown["beta.q4_1"]
        assert "…" in alpha and alpha.endswith("a/llm/models") and beta.endswith("n/llm/models")
        paths = {
            models.model.model_id(r): models.model.index(r, COL_FOLDER).data(3) for r in range(3)
        }
        assert paths["alpha.q4_1"] == str(folders[0] / "alpha.Q4_1.gguf")


async def test_details_show_structured_output_indented_and_what_narrow_columns_hide(
    qtbot: Any, tmp_path: Path
) -> None:
    """Structured output reads as indented JSON; the header carries the restart policy and
    the run time, which the table drops first at 900 px; with nothing selected the Output
    tab says where output will appear instead of "No output yet."."""
    engine = FakeEngine(['{"city":', ' "Paris",', ' "days":', " 3}"])
    async with open_app(qtbot, tmp_path, engine=engine) as (core, window):
        tasks = window.tasks
        assert tasks.details.output.placeholderText() == "The selected task's output appears here."
        schema = {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
            "additionalProperties": False,
        }
        text = {"format": {"type": "json_schema", "name": "trip", "schema": schema}}
        task_id = await post_background(core, await client_token(core), text=text)

        async def done() -> bool:
            return bool((await core.task(task_id))["state"] == "completed")

        await until(done, what="the task done")
        tasks.show_task(task_id)
        await until(lambda: tasks.details.state == "completed", what="the details of the task")
        output = tasks.details.output.toPlainText()
        assert output == '{\n  "city": "Paris",\n  "days": 3\n}', output
        header = tasks.details.header.text()  # phrases wrap whole (no-break spaces inside)
        # An ended task: no restart policy (a restart cannot touch it), the time it ran.
        assert "restart" not in header and "ran\u00a0" in header, header


JARGON = ("on_restart", "503", "response.", "seq ")


def texts_of(dialog: Any) -> str:
    """Every label and button text of a dialog, to look for API jargon."""
    widgets = [*dialog.findChildren(QLabel), *dialog.findChildren(QPushButton)]
    return " ".join(w.text() for w in widgets)


async def test_every_dialog_fits_a_900x600_screen_without_jargon(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (core, window):
        window.resize(900, 600)
        seen = {}

        async def look(name: str, dialog: Any) -> None:
            await settle(window)
            assert dialog.isVisible(), name
            size = dialog.frameGeometry()
            assert size.width() <= 900 and size.height() <= 570, (name, size)
            found = [j for j in JARGON if j in texts_of(dialog)]
            assert not found, (name, found)
            seen[name] = dialog

        window.open_settings()
        await look("settings", window.dialog)
        window.dialog.reject()
        await window.open_prompt()
        await look("try a prompt", window.dialog)
        window.dialog.reject()
        window.open_connect()
        connect = window.dialog
        await look("connect", connect)
        width = connect.width()
        await connect.create_token()
        await look("connect, token made", connect)
        assert connect.width() == width  # the longer note wraps instead of widening it
        connect.reject()
        window.open_pair()
        await look("pair", window.dialog)
        window.dialog.reject()
        window.open_about()
        await look("about", window.dialog)
        window.dialog.reject()

        task_id = await post_background(core, await client_token(core))
        await until(lambda: window.tasks.model.row_of(task_id) is not None, what="the task")
        window.request_quit()
        await until(lambda: isinstance(window.dialog, QuitDialog), what="the quit question")
        quit_dialog = window.dialog
        await look("quit", quit_dialog)
        quit_dialog.wait_button.click()
        await look("quit, waiting", quit_dialog)
        for label in (quit_dialog.body, quit_dialog.progress):  # not squeezed by the new text
            assert label.height() >= label.heightForWidth(label.width()), label.text()
        quit_dialog.keep_button.click()
        await core.cancel(task_id)
        assert len(seen) == 8


async def test_a_tool_call_reads_in_output_and_events_with_the_demo_model(
    qtbot: Any, tmp_path: Path
) -> None:
    """The real model calls a function: the Output tab shows the call, the Events tab the
    complete arguments on `function_call_arguments.done` and the call's name on its item."""
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    async with open_app(qtbot, tmp_path) as (core, window):
        task_id = await post_background(
            core,
            await client_token(core),
            input="What is the weather in Paris? Use the tool.",
            tools=tools,
            tool_choice="required",
            max_output_tokens=80,
        )

        async def done() -> bool:
            return bool((await core.task(task_id))["state"] == "completed")

        await until(done, limit=120, what="the tool call made")
        tasks = window.tasks
        tasks.show_task(task_id)
        await until(lambda: tasks.details.state == "completed", what="the details")
        assert tasks.details.output.toPlainText().startswith("→ get_weather({")
        events = tasks.details.events
        await until(lambda: events.rowCount() > 4, what="the events listed")
        rows = {
            events.index(r, COL_EVENT_TYPE).data(): events.index(r, COL_EVENT_DATA).data()
            for r in range(events.rowCount())
        }
        arguments = rows["response.function_call_arguments.done"]
        assert json.loads(arguments)["city"], arguments
        assert "get_weather()" in rows["response.output_item.done"]


async def test_a_busy_window_still_fits_900x600(qtbot: Any, tmp_path: Path) -> None:
    """Every state counted, paused, two models in memory and four recent tasks: the glance
    panel scrolls instead of holding the window taller than 600 px; the status bar's chips
    do not hold it wider than 900 px."""
    async with open_app(qtbot, tmp_path, engine=slow_engine()) as (_, window):
        side = window.sidebar
        side.set_counts({state: 3 for state in TaskState})
        side.set_paused(True)
        side.set_loaded(
            [
                (MODEL, 98_000_000, "unloads in 10 min"),
                ("gemma3-270m-it", 253_000_000, "loading…"),
            ]
        )
        side.on_changes(
            {
                f"resp_{i}": TaskChange(f"resp_{i}0123456789", TaskState.COMPLETED, 3, MODEL)
                for i in range(4)
            }
        )
        # ...and the status bar, paused and bound to the network, holds it no wider.
        window.set_paused(True)
        window.status.set_service(window.core.url, "0.0.0.0")
        window.status.showMessage("Copied http://127.0.0.1:5677/v1")
        window.resize(900, 600)
        await settle(window)
        assert (window.width(), window.height()) == (900, 600)
        assert window.status.paused_chip.isVisible() and window.status.warning.isVisible()
        counts = window.status.counts_label  # narrowed: it ends in "…", never mid-word
        shown = counts.shown_text()
        assert shown == counts.text() or shown.endswith("…"), shown
        window.set_paused(False)


@pytest.mark.parametrize(("screen_w", "screen_h"), [(900, 600), (1600, 1000)])
async def test_the_first_launch_fits_the_screen_it_opens_on(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, screen_w: int, screen_h: int
) -> None:
    """No saved geometry yet: on a 900x600 screen the window, its title bar included, fits (it
    opened 1200x780 and hid its right edge and status bar); on a big screen it is roomy."""
    monkeypatch.setattr(main_window, "screen_room", lambda _: QRect(0, 0, screen_w, screen_h))
    async with open_app(qtbot, tmp_path) as (_, window):
        await settle(window)
        assert window.width() + 10 <= screen_w and window.height() + 50 <= screen_h
        if screen_w >= 1600:
            assert (window.width(), window.height()) == (1200, 780)
        assert window.status.isVisible() and window.tasks.search.isVisible()
