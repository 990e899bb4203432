"""The Download dialog's row of a file says what a user needs at a glance: a hub address
pasted in the search box opens its repo with the file selected; a download waiting for the
hub says so ("↻ waiting for the hub", not "downloading…"); a file already on this machine
(the demo model's bytes) keeps "✓ demo copy" after its download is cancelled (it said
"✗ download cancelled" while the status line said it is here); and with the Retry column
shown the file's name stays whole (it was cut to "Smo…5M-Inst…gguf"). Real MainWindow over
a real core, a real (fake) hub on loopback that goes away."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.dialogs.download_dialog import COL_FIT, COL_RETRY, WAITING, DownloadDialog
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import DEMO_FILE, DEMO_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


def mark(dialog: DownloadDialog, row: int) -> str:
    cell = dialog.files.item(row, COL_FIT)
    lines = [] if cell is None else cell.text().split("\n")
    return lines[0] if len(lines) == 2 else ""


async def test_a_pasted_address_a_wait_for_the_hub_and_a_cancelled_copy_read_right(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        downloads = core.downloads  # type: ignore[attr-defined]
        # Waits for the hub a long while (the test cancels it meanwhile), the first soon.
        downloads.retry_first, downloads.retry_most, downloads.retry_for = 0.05, 0.1, 600

        async def demo_hashed() -> bool:
            return any(m.source == "demo" and m.digest for m in await core.models())

        await until(demo_hashed, 60, "the demo model's digest")
        window.nav.setCurrentRow(1)  # Models
        window.models.download_button.click()
        dialog = window.models.download_dialog
        assert dialog is not None
        dialog.query.setText(f"https://huggingface.co/{DEMO_REPO}/blob/main/{DEMO_FILE}")
        dialog.search_button.click()
        # The repo opens by itself, its file selected and described.
        await until(lambda: dialog.files.rowCount() == 1, what=dialog.status.text)
        assert dialog.repo == DEMO_REPO
        await until(lambda: dialog.selected_choice() is not None, what=dialog.status.text)
        assert mark(dialog, 0) == "✓ demo copy"

        started: list[str] = []
        dialog.started.connect(started.append)
        hub.server.bytes_per_s = 1024 * 1024  # still running when the hub goes
        dialog.download_button.click()
        await until(lambda: started, what=dialog.status.text)
        await until(lambda: mark(dialog, 0) == "↓ downloading…", what=lambda: mark(dialog, 0))
        await hub.server.stop()
        await until(lambda: mark(dialog, 0) == WAITING, 30, lambda: mark(dialog, 0))
        assert (await core.task(started[0]))["state"] == "running"

        await core.cancel(started[0])  # as Cancel in the Tasks table does
        await until(lambda: not dialog.files.isColumnHidden(COL_RETRY), 30, dialog.status.text)
        assert mark(dialog, 0) == "✓ demo copy"  # the copy is still here
        assert "already on this machine" in dialog.status.text(), dialog.status.text()
        # The file's name whole beside the Retry column, at the dialog's own size.
        await until(lambda: dialog.files.cellWidget(0, COL_RETRY).width() > 0)
        # Whole: on one line, or wrapped at its "-" (the cell wraps), never elided.
        fonts, room = dialog.files.fontMetrics(), dialog.files.columnWidth(0) - 8
        pieces = ["SmolLM2-135M-", "Instruct.Q4_1.gguf"]
        assert "".join(pieces) == DEMO_FILE
        assert all(fonts.horizontalAdvance(p) <= room for p in pieces), room
        # And the repo list keeps its ids whole.
        repo_id = fonts.horizontalAdvance(DEMO_REPO)
        assert dialog.repos.viewport().width() > repo_id, dialog.repos.viewport().width()
        dialog.grab().save(str(tmp_path / "marks.png"))
        dialog.close()
