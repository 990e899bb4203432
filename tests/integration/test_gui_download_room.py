"""The Download dialog's repo list gets its room back once no Retry column needs it (the
twentieth walk found it narrow for good: a cancelled file's Retry column had the list give
the file table room, and the list never had it back after Retry). The real MainWindow over a
real core, a real (fake) hub on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.dialogs.download_dialog import COL_RETRY
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


async def test_the_repo_list_has_its_room_back_once_retry_is_gone(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        window.nav.setCurrentRow(1)  # Models
        window.models.download_button.click()
        dialog = window.models.download_dialog
        assert dialog is not None and dialog.isVisible()
        dialog.query.setText("tiny")
        dialog.search_button.click()
        await until(lambda: dialog.repos.count() == 1, what=dialog.status.text)
        dialog.repos.setCurrentRow(0)
        await until(lambda: dialog.files.rowCount() == 3, what=dialog.status.text)
        row = next(r for r in range(3) if dialog.files.item(r, 0).text() == "tiny-Q8_0.gguf")
        dialog.files.selectRow(row)
        repos_before = dialog.repos.width()
        files_before = dialog.files.width()

        started: list[str] = []
        dialog.started.connect(started.append)
        hub.server.bytes_per_s = 256 * 1024  # still running when cancelled
        dialog.download_button.click()
        await until(lambda: started, what=dialog.status.text)
        await core.cancel(started[0])  # as Cancel in the Tasks table does
        await until(lambda: dialog.files.cellWidget(row, COL_RETRY) is not None, 30)
        button = dialog.files.cellWidget(row, COL_RETRY)
        await until(lambda: button.width() > 0, what=lambda: str(button.size()))
        # The Retry column took its room from the repo list (the names kept theirs).
        assert dialog.repos.width() < repos_before, (dialog.repos.width(), repos_before)
        dialog.grab().save(str(tmp_path / "with-retry.png"))

        hub.server.bytes_per_s = None
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        await until(lambda: len(started) == 2, what=dialog.status.text)
        await until(lambda: dialog.files.isColumnHidden(COL_RETRY), what="Retry column gone")
        # No button needs the room now: the repo list has it back, the files their width.
        await until(
            lambda: dialog.repos.width() == repos_before,
            what=lambda: (dialog.repos.width(), repos_before, dialog.split.sizes()),
        )
        assert dialog.files.width() == files_before
        dialog.grab().save(str(tmp_path / "retry-gone.png"))

        async def completed() -> bool:
            return (await core.task(started[1]))["state"] == "completed"

        await until(completed, 30, "the download started again")
        assert dialog.repos.width() == repos_before  # and keeps it after the download ends
        dialog.close()
