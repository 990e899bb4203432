"""Settings keep what the user set, and only that (issue 16, defects 3 and 4): a folder added
on the Models page is a model folder from then on, and one-off command-line flags (`--port 0`,
`--models-dir`) apply to their run and are never written back. Real core, real window."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from lmsp_desktop.core.config import DEFAULT_PORT
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.gui.dialogs.settings_dialog import SettingsDialog
from lmsp_desktop.gui.models.model_table import Role
from tests.integration.gui_windows import client_token, open_app, post_background, slow_engine
from tests.support.polling import until

pytestmark = pytest.mark.gui

EXTRA = "tiny-chat.q4_1"  # the id the registry gives tiny-chat.Q4_1.gguf


def model_folder(tmp_path: Path) -> Path:
    """A folder holding one real GGUF (a hard link to the demo model: no 98 MB copy)."""
    folder = tmp_path / "more-models"
    folder.mkdir()
    demo = demo_model_path()
    assert demo is not None
    os.link(demo, folder / "tiny-chat.Q4_1.gguf")
    return folder


def model_state(window: Any, model_id: str) -> str | None:
    table = window.models.model
    for row in range(table.rowCount()):
        if table.model_id(row) == model_id:
            return str(table.index(row, 0).data(Role.STATE))
    return None


async def save(qtbot: Any, dialog: SettingsDialog) -> None:
    qtbot.mouseClick(
        dialog.buttons.button(QDialogButtonBox.StandardButton.Save), Qt.MouseButton.LeftButton
    )
    await until(lambda: not dialog.isVisible(), what=lambda: dialog.error.text() or "saved")


async def test_folder_added_on_the_models_page_survives_settings_and_restart(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = model_folder(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    async with open_app(qtbot, data, engine=FakeEngine()) as (core, window):
        window.nav.setCurrentRow(1)
        qtbot.mouseClick(window.models.add_button, Qt.MouseButton.LeftButton)
        window.models.folder_dialog.fileSelected.emit(str(folder))  # the user picks it
        await until(lambda: model_state(window, EXTRA) == "verified", what="the new model")

        # Settings lists it; saving a change of retention alone keeps it (and its model).
        window.open_settings()
        dialog = window.dialog
        listed = [dialog.folders.item(i).text() for i in range(dialog.folders.count())]
        assert str(folder) in listed
        dialog.retention.setValue(3)
        await save(qtbot, dialog)
        await core.rescan_models()
        await until(lambda: model_state(window, EXTRA) == "verified", what="still verified")

    async with open_app(qtbot, data, engine=FakeEngine()) as (core, window):
        assert str(folder) in core.stored_settings.model_dirs
        await until(lambda: model_state(window, EXTRA) == "verified", what="after a restart")


async def test_command_line_flags_apply_to_their_run_and_are_never_saved(
    qtbot: Any, tmp_path: Path
) -> None:
    flag_folder = model_folder(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    args = {"engine": FakeEngine(), "port": 0, "model_dirs": [flag_folder], "max_context": 2048}
    async with open_app(qtbot, data, **args) as (core, window):
        assert core.settings.port == 0 and core.url.rsplit(":", 1)[1] != "0"
        assert core.settings.max_context == 2048
        window.open_settings()
        dialog = window.dialog
        assert dialog.port.value() == DEFAULT_PORT  # what the user set, not --port 0
        assert dialog.max_context.value() == 0  # nor --max-context 2048
        assert dialog.flag_note.isVisibleTo(dialog) and "--port 0" in dialog.flag_note.text()
        assert "--max-context 2048" in dialog.flag_note.text()
        listed = [dialog.folders.item(i).text() for i in range(dialog.folders.count())]
        assert str(flag_folder) not in listed
        dialog.retention.setValue(2)
        await save(qtbot, dialog)
        stored = await core.store.settings()
        assert stored.port == DEFAULT_PORT and stored.retention_days == 2
        assert str(flag_folder) not in stored.model_dirs and stored.max_context == 0
        # This run keeps its flags: still on its port, still with the flag's model.
        assert core.settings.port == 0 and core.settings.max_context == 2048
        await until(lambda: model_state(window, EXTRA) == "verified", what="the flag's model")


async def test_concurrent_requests_per_model_is_a_setting_the_runner_obeys(
    qtbot: Any, tmp_path: Path
) -> None:
    """Settings → Concurrent requests per model = 1 → Save: two clients' tasks for one model
    run one at a time (the second waits first in the queue), and the choice is kept."""
    data = tmp_path / "data"
    async with open_app(qtbot, data, engine=slow_engine()) as (core, window):
        window.open_settings()
        dialog = window.dialog
        assert dialog.parallel.value() == 4  # the default, as the README says
        dialog.parallel.setValue(1)
        await save(qtbot, dialog)

        token = await client_token(core)
        first = await post_background(core, token)
        await until(lambda: state_shown(window, first) == "running", what="the first running")
        second = await post_background(core, token)
        await until(lambda: window.tasks.model.task(second) is not None, what="the second")
        await asyncio.sleep(0.3)  # were a second lane open, it would be running by now
        row = window.tasks.model.task(second)
        assert row is not None and (row.state, row.queue_position) == ("queued", 1)
        assert state_shown(window, first) == "running"
        await core.cancel(first)  # its lane frees: the second starts
        await until(lambda: state_shown(window, second) == "running", what="the second running")
        await core.cancel(second)

    async with open_app(qtbot, data, engine=FakeEngine()) as (core, window):
        assert core.stored_settings.parallel_per_model == 1


def state_shown(window: Any, task_id: str) -> str | None:
    row = window.tasks.model.task(task_id)
    return row.state if row is not None else None
