"""The Download dialog on the real MainWindow over a real core and a real (fake) hub:
search, pick a file, Download; the task's progress, speed and time left in the task table;
Cancel in the table stops it and leaves no file behind."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.gui.models.event_table import COL_DATA
from lmsp_desktop.gui.models.task_table import COL_DURATION, COL_STATE, COL_TOKENS, COL_TPS, Role
from tests.integration.gui_windows import open_app, slow_engine
from tests.support.fake_hub import FakeHub
from tests.support.hub_repos import TINY_REPO, Hub, hub_repos
from tests.support.polling import until

pytestmark = pytest.mark.gui


@pytest.fixture
async def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hub]:
    server = FakeHub(hub_repos())
    await server.start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    try:
        yield Hub(server, tmp_path / "hf-cache")
    finally:
        await server.stop()


async def test_search_pick_download_watch_and_cancel_in_the_window(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=slow_engine()) as (core, window):
        window.nav.setCurrentRow(1)  # Models
        window.models.download_button.click()
        dialog = window.models.download_dialog
        assert dialog is not None and dialog.isVisible()
        assert not dialog.download_button.isEnabled()  # nothing picked yet

        # A real GGUF on the hub: its header is read with a Range request and planned as a
        # local model would be (the 98 MB demo fits this machine).
        # The hub's SmolLM2 file is the demo model's bytes: once the demo's digest is known,
        # the file's row says it is on this machine already (no 98 MB download needed).
        async def demo_hashed() -> bool:
            return any(m.source == "demo" and m.digest for m in await core.models())

        await until(demo_hashed, 60, "the demo model's digest")
        dialog.query.setText("SmolLM2")
        dialog.search_button.click()
        await until(lambda: dialog.repos.count() == 1, what=dialog.status.text)
        dialog.repos.setCurrentRow(0)
        await until(lambda: dialog.files.rowCount() == 1, what=dialog.status.text)
        dialog.files.selectRow(0)
        fit = lambda: dialog.files.item(0, 3).text().split("\n")[-1]  # noqa: E731
        await until(lambda: fit().startswith("✓ fits"), what=fit)
        assert "tokens" in fit()
        # The estimate as the Models page and `models list` say it ("1.28 GiB", not "1.3 GiB").
        assert re.search(r" · \d+\.\d\d GiB at [\d,]+ tokens$", fit()), fit()
        assert dialog.files.item(0, 3).text().startswith("✓ demo copy\n")  # On this machine
        assert "no download needed" in dialog.status.text(), dialog.status.text()
        hub.server.requests.clear()

        dialog.query.setText("tiny")
        dialog.search_button.click()
        await until(lambda: TINY_REPO in dialog.repos.item(0).text(), what=dialog.status.text)
        assert dialog.repos.count() == 1
        assert dialog.status.text() == "1 repo with GGUF files."
        dialog.repos.setCurrentRow(0)
        await until(lambda: dialog.files.rowCount() == 3, what=dialog.status.text)
        labels = [dialog.files.item(r, 0).text() for r in range(3)]
        assert "split/tiny-Q2_K-00001-of-00002.gguf (2 parts)" in labels  # split parts are one
        assert not any("mmproj" in label for label in labels)  # projectors are not models
        q8 = labels.index("tiny-Q8_0.gguf")
        assert dialog.files.item(q8, 1).text() == "Q8_0"
        assert dialog.files.item(q8, 2).text() == "3.0 MiB"
        dialog.files.selectRow(q8)
        assert dialog.download_button.isEnabled()
        # Its bytes are no GGUF header (test data): the estimate says it does not know.
        await until(lambda: dialog.files.item(q8, 3).text().startswith("unknown"), what=fit)
        # Why, in words on the dialog (it was only in a tooltip), about the file selected:
        await until(lambda: "could not be read" in dialog.status.text(), what=dialog.status.text)
        assert "tiny-Q8_0.gguf (3.0 MiB)" in dialog.status.text()
        # The repo pane shows its lines whole: the id, then its downloads.
        repo_lines = dialog.repos.item(0).text().split("\n")
        assert repo_lines[0] == TINY_REPO and repo_lines[1].endswith(" downloads"), repo_lines
        widest = max(dialog.fontMetrics().horizontalAdvance(line) for line in repo_lines)
        assert dialog.repos.viewport().width() >= widest
        started: list[str] = []
        dialog.started.connect(started.append)
        # Throttled from the download on, not before: the dialog reads each picked file's
        # header (its first 4 MiB) from the hub too, which at this speed took 27 of the
        # test's 31 s and is not what the throttle is for.
        hub.server.bytes_per_s = 256 * 1024  # ~12 s for the file: still running when cancelled
        dialog.download_button.click()
        await until(lambda: started, what=dialog.status.text)
        task_id = started[0]
        # Not a second click that does nothing: Download is off while the file downloads.
        assert not dialog.download_button.isEnabled()

        dialog.close()
        window.nav.setCurrentRow(0)  # Tasks
        tasks = window.tasks
        await until(lambda: tasks.model.row_of(task_id) is not None, what="the download's row")

        def cell(col: int, role: int = 0) -> Any:
            row = tasks.model.row_of(task_id)
            return None if row is None else tasks.model.index(row, col).data(role)

        await until(lambda: (cell(COL_TOKENS, Role.PROGRESS) or 0) > 0.05, what="progress")
        assert cell(COL_STATE) == "running"
        assert cell(COL_TOKENS).endswith("/ 3.0 MiB")  # bytes so far of the whole
        await until(lambda: str(cell(COL_TPS)).endswith("KiB/s"), what=lambda: cell(COL_TPS))
        assert str(cell(COL_DURATION)).endswith("left")  # its time left at this speed
        # At 900 px the time left stays in view, and the headers over the bytes and the speed
        # fit a download too (its bytes sat under "Tokens", its speed under "Tok/s").
        window.resize(900, 600)
        header = tasks.table.horizontalHeader()
        await until(
            lambda: tasks.fitter.hidden_columns() and not header.isSectionHidden(COL_DURATION),
            what=lambda: f"Duration shown at 900 px; hidden: {tasks.fitter.hidden_columns()}",
        )
        titles = [
            tasks.model.headerData(c, Qt.Orientation.Horizontal) for c in (COL_TOKENS, COL_TPS)
        ]
        assert titles == ["Output", "Speed"]

        tasks.table.selectRow(tasks.model.row_of(task_id))
        await until(lambda: tasks.cancel_button.isEnabled(), what="Cancel enabled")
        # Its Events tab says what each progress event carries (the Data column was empty).
        events = tasks.details.events

        def progress_data() -> list[str]:
            return [
                str(events.index(r, COL_DATA).data())
                for r in range(events.rowCount())
                if events.index(r, 2).data() == "progress"  # labelled, as lifecycle rows are
            ]

        await until(lambda: any("KiB/s" in d for d in progress_data()), what=progress_data)
        said = next(d for d in progress_data() if "KiB/s" in d)
        assert re.fullmatch(r"\d+\.\d (KiB|MiB) of 3\.0 MiB \(\d+%\), \d+\.\d KiB/s", said), said
        # The details say what a download is, not a generating model's cursor.
        output = tasks.details.output
        await until(
            lambda: "writes a file" in output.placeholderText(), what=output.placeholderText
        )
        assert output.toPlainText() == ""
        tasks.cancel_button.click()
        await until(lambda: cell(COL_STATE) == "cancelled", what=lambda: cell(COL_STATE))
        await until(
            lambda: output.placeholderText().startswith("Download cancelled."),
            what=output.placeholderText,
        )
        await until(lambda: hub.leftovers(TINY_REPO) == [], what=lambda: hub.leftovers(TINY_REPO))
        # How far it got, as its log line says, instead of "—".
        assert re.fullmatch(r"cancelled at \d+\.\d (KiB|MiB) of 3\.0 MiB", cell(COL_TOKENS))
        assert cell(COL_TOKENS, Role.PROGRESS) is None

        # Reopened, the dialog no longer says the file is downloading (it did, ended).
        window.models.download_button.click()
        assert dialog.isVisible() and dialog.selected_choice() is not None
        assert not dialog.status.text().startswith("Downloading"), dialog.status.text()
        assert dialog.status.text().startswith("tiny-Q8_0.gguf (3.0 MiB)"), dialog.status.text()
        dialog.close()

        # Downloaded again, to the end: a new task (the cancelled one is not joined), whose
        # Output then says what it fetched, without a bar.
        hub.server.bytes_per_s = None
        window.models.download_button.click()
        dialog.download_button.click()
        await until(lambda: len(started) == 2, what=dialog.status.text)
        dialog.close()
        task_id = started[1]
        assert task_id != started[0]
        await until(lambda: cell(COL_STATE) == "completed", what=lambda: cell(COL_STATE))
        assert cell(COL_TOKENS) == "3.0 MiB" and cell(COL_TOKENS, Role.PROGRESS) is None

        # The repo listed again: the file on disk says so (and only that one).
        window.models.download_button.click()
        dialog.repos.setCurrentRow(-1)
        dialog.repos.setCurrentRow(0)

        def on_disk() -> list[bool]:
            cells = [dialog.files.item(r, 3) for r in range(dialog.files.rowCount())]
            return [c is not None and c.text().startswith("✓ downloaded") for c in cells]

        await until(lambda: on_disk() == [r == q8 for r in range(3)], what=on_disk)
        dialog.files.selectRow(q8)
        await until(lambda: "downloaded already" in dialog.status.text(), what=dialog.status.text)
        dialog.close()
