"""Downloads left running by a killed window → the app's real startup: the recovery dialog
says what happens to each download (it goes on from its bytes on disk, how many), whole at
the dialog's size; the resumed one, finding no hub, waits in the Tasks table saying so."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QRect, QSettings, Qt

from lmsp_desktop.core.states import RestartPolicy
from lmsp_desktop.core.storage.downloads import NewDownload, create_download, record_progress
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.gui import launch
from lmsp_desktop.gui.dialogs.recovery_dialog import COL_EVENT, COL_MODEL, TASK_ID, RecoveryDialog
from lmsp_desktop.gui.main_window import MainWindow
from lmsp_desktop.gui.models.task_table import COL_STATE, COL_TOKENS
from tests.integration.gui_windows import launch_args
from tests.integration.test_gui_recovery import the_window
from tests.support.polling import until

pytestmark = pytest.mark.gui

REPO = "lmsp-test/SmolLM2-135M-Instruct-GGUF"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"  # a long repo:file, as the reviewer's was
TOTAL = 103_179_136
DONE = 41_000_000  # 39.1 MiB


async def leave_downloads(data_dir: Path) -> dict[str, str]:
    """Two downloads a killed window left running, 39.1 MiB in: policy resume and fail."""
    store = Store(data_dir)
    await store.open()
    made: dict[str, str] = {}
    try:
        for policy in ("resume", "fail"):
            spec = NewDownload(
                repo=REPO,
                revision="main",
                commit=("0" if policy == "resume" else "1") * 40,  # two tasks, not one joined
                files=[{"name": FILE, "size": TOTAL, "sha256": "a" * 64}],
                model=f"{REPO}:{FILE}",
                on_restart=RestartPolicy(policy),
            )
            task = await create_download(store.tasks, spec)
            await store.tasks.mark_running(task["id"], open_message=False)
            progress = {"file": FILE, "bytes_done": DONE, "bytes_total": TOTAL}
            assert await record_progress(store.tasks, task["id"], progress)
            made[policy] = task["id"]
    finally:
        await store.close()
    return made


async def test_the_recovery_report_says_what_each_download_goes_on_from(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a hub nobody answers for: the app starts offline
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    blobs = tmp_path / "hf-cache" / f"models--{REPO.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    with (blobs / ("a" * 64 + ".incomplete")).open("wb") as partial:  # its bytes on disk
        partial.truncate(DONE)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    made = await leave_downloads(data_dir)
    settings = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)
    app = asyncio.ensure_future(launch.main(launch_args(data_dir), settings))
    window: MainWindow | None = None
    try:
        await until(lambda: the_window(data_dir) is not None, what="the main window")
        window = the_window(data_dir)
        assert window is not None
        await until(
            lambda: isinstance(window.dialog, RecoveryDialog) and window.dialog.isVisible(),
            what="the recovery dialog",
        )
        dialog = window.dialog
        model = dialog.model
        said = {
            model.index(r, 0).data(TASK_ID): model.index(r, COL_EVENT).data()
            for r in range(model.rowCount())
        }
        assert said == {
            made["resume"]: "Resumed: it continues from the 39.1 MiB on disk",
            # How far it got, as the resumed one says it (it said nothing of its 39.1 MiB).
            made["fail"]: "Failed: the service restarted (its 39.1 MiB on disk are kept: "
            "pull it again to go on)",
        }
        assert "2 failed" not in dialog.summary.text()  # chips: "1 failed… · 1 resumed"
        assert dialog.summary.text().endswith("1 resumed"), dialog.summary.text()
        # Each sentence whole at the dialog's own size: wrapped in its row, never cut, and
        # the long repo:file is elided (whole in its tooltip) instead of taking the room.
        table = dialog.table
        metrics = table.fontMetrics()
        width = table.horizontalHeader().sectionSize(COL_EVENT) - 8  # the cell's margins
        for row in range(model.rowCount()):
            text = model.index(row, COL_EVENT).data()
            needed = metrics.boundingRect(
                QRect(0, 0, width, 10_000), Qt.TextFlag.TextWordWrap, text
            )
            assert needed.width() <= width and needed.height() <= table.rowHeight(row), text
            assert model.index(row, COL_MODEL).data(Qt.ItemDataRole.ToolTipRole) == f"{REPO}:{FILE}"
        assert table.horizontalHeader().sectionSize(
            COL_EVENT
        ) > table.horizontalHeader().sectionSize(COL_MODEL)
        dialog.reject()

        # The resumed one found no hub: still running, its row says it waits and until when.
        tasks = window.tasks

        def cell(col: int, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
            row = tasks.model.row_of(made["resume"])
            return None if row is None else tasks.model.index(row, col).data(role)

        await until(
            lambda: "waiting for the hub until" in str(cell(COL_TOKENS)),
            what=lambda: cell(COL_TOKENS),
        )
        assert cell(COL_STATE) == "running"
        assert str(cell(COL_TOKENS)).startswith("39.1 MiB / 98.4 MiB")
        assert "cannot be reached (Connection refused)" in cell(
            COL_TOKENS, Qt.ItemDataRole.ToolTipRole
        )
    finally:
        if window is not None:
            window.quit()
        status = await asyncio.wait_for(app, 30)
    assert status == 0
