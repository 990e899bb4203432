"""A download that fails has a Retry where the user sees it fail: its row in the Download
dialog says "✗ download failed" with a Retry button, the status line says why, and Retry
starts the same download again, continuing from the bytes the failure kept (the user had to
find the file again and press Download). Real MainWindow over a real core, a real (fake) hub
on loopback that goes away mid-download and comes back."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QPushButton

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.dialogs.download_dialog import COL_FIT, COL_RETRY
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import TINY_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


def partial_size(hub: Hub) -> int:
    found = list(hub.blob_dir(TINY_REPO).glob("*.incomplete"))
    return found[0].stat().st_size if found else 0


async def test_a_failed_download_has_retry_in_its_row_which_continues_from_its_bytes(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        # The hub's absence is waited for a moment only (ten minutes in the app).
        downloads = core.downloads  # type: ignore[attr-defined]
        downloads.retry_first, downloads.retry_most, downloads.retry_for = 0.05, 0.1, 0.3
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
        assert dialog.files.isColumnHidden(COL_RETRY)  # nothing failed: no Retry column
        started: list[str] = []
        dialog.started.connect(started.append)
        hub.server.bytes_per_s = 512 * 1024  # ~6 s for its 3 MiB: the hub goes away mid-way
        dialog.download_button.click()
        await until(lambda: started, what=dialog.status.text)
        await until(lambda: partial_size(hub) > 512 * 1024, 30, lambda: partial_size(hub))
        port = urlparse(hub.server.url).port
        await hub.server.stop()

        fit = lambda: dialog.files.item(row, COL_FIT).text()  # noqa: E731
        await until(lambda: fit().startswith("✗ download failed\n"), 30, fit)
        assert (await core.task(started[0]))["state"] == "failed"
        kept = partial_size(hub)
        assert kept > 512 * 1024  # the failure kept its bytes
        # Why, on the dialog's status line, and what Retry does.
        await until(lambda: "cannot be reached" in dialog.status.text(), what=dialog.status.text)
        assert dialog.status.text().startswith("The download of tiny-Q8_0.gguf failed. ")
        assert "Retry (in its row)" in dialog.status.text()
        button = dialog.files.cellWidget(row, COL_RETRY)
        assert isinstance(button, QPushButton) and button.text() == "Retry"
        assert not dialog.files.isColumnHidden(COL_RETRY) and button.isVisible()
        assert button.width() >= button.sizeHint().width()  # its word whole
        others = [r for r in range(3) if r != row]
        assert all(dialog.files.cellWidget(r, COL_RETRY) is None for r in others)
        dialog.grab().save(str(tmp_path / "retry.png"))

        await hub.server.start(port or 0)  # the hub is back
        hub.server.bytes_per_s = None
        hub.server.requests.clear()
        # As a user sees it: laid out in its column, just shown (a click on the button
        # before the layout catches up hits a 0x0 widget, which ignores it; a loaded run).
        await until(lambda: button.width() > 0, what=lambda: str(button.size()))
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        await until(lambda: len(started) == 2, what=dialog.status.text)
        assert started[1] != started[0]  # a new download task, as Download makes
        selected = dialog.selected_choice()
        assert selected is not None and selected.name == "tiny-Q8_0.gguf"  # the row stays

        async def completed() -> bool:
            return (await core.task(started[1]))["state"] == "completed"

        await until(completed, 30, "the retried download")
        file_gets = [
            r for m, p, r in hub.server.requests if m == "GET" and p.endswith("/tiny-Q8_0.gguf")
        ]
        assert file_gets == [f"bytes={kept}-"]  # continued from the kept bytes, once
        await until(lambda: fit().startswith("✓ downloaded\n"), what=fit)
        assert dialog.files.cellWidget(row, COL_RETRY) is None
        assert dialog.files.isColumnHidden(COL_RETRY)
        dialog.close()


async def test_a_cancelled_download_has_retry_in_its_row_too(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        window.nav.setCurrentRow(1)  # Models
        window.models.download_button.click()
        dialog = window.models.download_dialog
        assert dialog is not None
        dialog.query.setText("tiny")
        dialog.search_button.click()
        await until(lambda: dialog.repos.count() == 1, what=dialog.status.text)
        dialog.repos.setCurrentRow(0)
        await until(lambda: dialog.files.rowCount() == 3, what=dialog.status.text)
        row = next(r for r in range(3) if dialog.files.item(r, 0).text() == "tiny-Q8_0.gguf")
        dialog.files.selectRow(row)
        started: list[str] = []
        dialog.started.connect(started.append)
        hub.server.bytes_per_s = 256 * 1024  # still running when cancelled
        dialog.download_button.click()
        await until(lambda: started, what=dialog.status.text)
        await core.cancel(started[0])  # as Cancel in the Tasks table does

        fit = lambda: dialog.files.item(row, COL_FIT).text()  # noqa: E731
        await until(lambda: fit().startswith("✗ download cancelled\n"), 30, fit)
        button = dialog.files.cellWidget(row, COL_RETRY)
        assert isinstance(button, QPushButton) and button.isVisible()
        # A cancel was the user's doing: the status line describes the file as before.
        assert dialog.status.text().startswith("tiny-Q8_0.gguf (3.0 MiB)"), dialog.status.text()
        hub.server.bytes_per_s = None
        # As a user sees it: laid out in its column, just shown (a click on the button
        # before the layout catches up hits a 0x0 widget, which ignores it; a loaded run).
        await until(lambda: button.width() > 0, what=lambda: str(button.size()))
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        await until(lambda: len(started) == 2, what=dialog.status.text)
        assert started[1] != started[0]
        assert dialog.files.cellWidget(row, COL_RETRY) is None

        async def completed() -> bool:
            return (await core.task(started[1]))["state"] == "completed"

        await until(completed, 30, "the download started again")
        await until(lambda: fit().startswith("✓ downloaded\n"), what=fit)
        dialog.close()


async def test_download_again_on_a_cancelled_file_keeps_that_file_selected(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    """walkH19: Download (not Retry) on a cancelled file moved the selection to the next file
    as the Retry column went, so a second click would fetch a file nobody chose."""
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        window.nav.setCurrentRow(1)  # Models
        window.models.download_button.click()
        dialog = window.models.download_dialog
        assert dialog is not None
        dialog.query.setText("tiny")
        dialog.search_button.click()
        await until(lambda: dialog.repos.count() == 1, what=dialog.status.text)
        dialog.repos.setCurrentRow(0)
        await until(lambda: dialog.files.rowCount() == 3, what=dialog.status.text)
        row = next(r for r in range(3) if dialog.files.item(r, 0).text() == "tiny-Q8_0.gguf")
        qtbot.mouseClick(
            dialog.files.viewport(),
            Qt.MouseButton.LeftButton,
            pos=dialog.files.visualRect(dialog.files.model().index(row, 0)).center(),
        )
        started: list[str] = []
        dialog.started.connect(started.append)
        hub.server.bytes_per_s = 256 * 1024  # still running when cancelled
        dialog.download_button.click()
        await until(lambda: started, what=dialog.status.text)
        await core.cancel(started[0])
        await until(lambda: dialog.files.cellWidget(row, COL_RETRY) is not None, 30)
        hub.server.bytes_per_s = None
        await until(lambda: dialog.download_button.isEnabled(), what=dialog.status.text)
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
        await until(lambda: len(started) == 2, what=dialog.status.text)
        await until(lambda: dialog.files.cellWidget(row, COL_RETRY) is None)
        choice = dialog.selected_choice()
        assert choice is not None and choice.name == "tiny-Q8_0.gguf", choice
        dialog.close()
