"""The Download dialog's "On this machine" cell tells the truth about the file: it follows
a download started there (downloading…, then ✓ downloaded) with Download off meanwhile, and
it never calls a deleted local file a copy on this machine. Real MainWindow over a real
core, a real (fake) hub on loopback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.gui.dialogs.download_dialog import COL_FIT, DOWNLOADING, DownloadDialog
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import DEMO_REPO, TINY_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


def mark(dialog: DownloadDialog, row: int) -> str:
    """What the cell says the file is on this machine: its line above the memory estimate
    ("" with none)."""
    cell = dialog.files.item(row, COL_FIT)
    lines = [] if cell is None else cell.text().split("\n")
    return lines[0] if len(lines) == 2 else ""


async def list_repo(dialog: DownloadDialog, query: str, rows: int) -> None:
    """Search, pick the first repo and wait for its files, listed afresh."""
    dialog.repos.clear()
    dialog.query.setText(query)
    dialog.search_button.click()
    await until(lambda: dialog.repos.count() >= 1, what=dialog.status.text)
    dialog.repos.setCurrentRow(0)
    # The line the listing ends with ("…: 3 GGUF models. Pick one…").
    await until(lambda: "GGUF model" in dialog.status.text(), what=dialog.status.text)
    assert dialog.files.rowCount() == rows


async def test_the_cell_follows_a_download_and_download_is_off_while_it_runs(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine(), include_demo=False) as (
        core,
        window,
    ):
        window.nav.setCurrentRow(1)  # Models
        window.models.download_button.click()
        dialog = window.models.download_dialog
        assert dialog is not None
        await list_repo(dialog, "tiny", 3)
        row = next(r for r in range(3) if dialog.files.item(r, 0).text() == "tiny-Q8_0.gguf")
        dialog.files.selectRow(row)
        estimate = lambda: dialog.files.item(row, COL_FIT).text()  # noqa: E731
        await until(lambda: estimate().startswith("unknown"), what=estimate)
        started: list[str] = []
        dialog.started.connect(started.append)
        hub.server.bytes_per_s = 256 * 1024  # ~12 s: still running while looked at
        dialog.download_button.click()
        await until(lambda: started, what=dialog.status.text)

        assert mark(dialog, row) == DOWNLOADING  # the cell, not only the line below
        assert not dialog.download_button.isEnabled()  # a second click did nothing
        assert dialog.status.text().startswith("Downloading tiny-Q8_0.gguf")
        # Another file picked: its own Download is there; back on this one, off again.
        other = (row + 1) % 3
        dialog.files.selectRow(other)
        assert dialog.download_button.isEnabled()
        assert mark(dialog, other) != DOWNLOADING
        dialog.files.selectRow(row)
        assert not dialog.download_button.isEnabled()

        hub.server.bytes_per_s = None  # the rest at full speed
        await until(lambda: mark(dialog, row) == "✓ downloaded", 30, lambda: mark(dialog, row))
        assert "downloaded already" in dialog.status.text(), dialog.status.text()
        assert dialog.download_button.isEnabled()  # Download checks it against the hub
        # Closed and opened again, the repo listed afresh: the same words.
        dialog.close()
        window.models.download_button.click()
        await list_repo(dialog, "tiny", 3)
        assert mark(dialog, row) == "✓ downloaded"

        # A download of a listed file started elsewhere (`models pull`, the API: the same
        # core pull) is followed too, by its task's name.
        q4 = next(r for r in range(3) if dialog.files.item(r, 0).text() == "tiny-Q4_K_M.gguf")
        dialog.files.selectRow(q4)
        assert dialog.download_button.isEnabled()
        hub.server.bytes_per_s = 256 * 1024
        await pull(core.store.tasks, TINY_REPO, "q4_k_m")
        await until(lambda: mark(dialog, q4) == DOWNLOADING, 30, lambda: mark(dialog, q4))
        assert not dialog.download_button.isEnabled()
        assert dialog.status.text().startswith("Downloading tiny-Q4_K_M.gguf")
        hub.server.bytes_per_s = None
        await until(lambda: mark(dialog, q4) == "✓ downloaded", 30, lambda: mark(dialog, q4))
        assert dialog.download_button.isEnabled()


async def test_a_deleted_local_copy_is_not_called_a_copy(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    """The hub's SmolLM2 file is the demo model's bytes: a folder holding them is a local
    copy of it ("✓ folder copy"); once that file is deleted (the Models page says missing
    after Rescan), the dialog no longer offers it as one."""
    folder = tmp_path / "models"
    folder.mkdir()
    local = folder / "smol.gguf"
    demo = demo_model_path()
    assert demo is not None
    os.link(demo, local)  # the same bytes, no 98 MB copy
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), include_demo=False, model_dirs=[folder]
    ) as (core, window):

        async def hashed() -> bool:
            return any(m.path == local and m.digest for m in await core.models())

        await until(hashed, 60, "the folder copy's digest")
        window.nav.setCurrentRow(1)  # Models
        window.models.download_button.click()
        dialog = window.models.download_dialog
        assert dialog is not None
        await list_repo(dialog, DEMO_REPO.split("/")[1], 1)
        assert mark(dialog, 0) == "✓ folder copy"
        dialog.files.selectRow(0)
        await until(lambda: "no download needed" in dialog.status.text(), what=dialog.status.text)
        dialog.close()

        local.unlink()
        window.models.rescan_button.click()

        async def missing() -> bool:
            return [m.state for m in await core.models() if m.path == local] == ["missing"]

        await until(missing, 30, "the deleted copy marked missing")
        window.models.download_button.click()
        await list_repo(dialog, DEMO_REPO.split("/")[1], 1)
        assert mark(dialog, 0) == ""  # nothing on this machine (the estimate follows)
        dialog.files.selectRow(0)
        await until(lambda: "fits" in dialog.status.text(), 60, dialog.status.text)
        assert "already on this machine" not in dialog.status.text(), dialog.status.text()
        assert "Download fetches it" in dialog.status.text()
