"""A download's details pane in download words (the nineteenth walk): its lifecycle events
are labelled as a download's ("download resumed", "cancelling…"; the stored types stay in
the tooltip), an ended download says nothing of what a restart would do, a download resumed
after a quit says how long it ran from its first start, and a failed or cancelled one has
Retry beside Copy id, the same pull the Download dialog's Retry makes. Real MainWindow over a
real core, a real (fake) hub on loopback, a real quit and relaunch on the same data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.format import clock, human_duration
from lmsp_desktop.gui.models.event_table import COL_DATA, COL_TYPE
from tests.integration.gui_windows import open_app
from tests.support.hub_repos import TINY_REPO, Hub
from tests.support.polling import until

pytestmark = pytest.mark.gui
pytest_plugins = ["tests.integration.download_fixtures"]


def event_cells(details: Any) -> list[tuple[str, str, str]]:
    """(Type shown, its tooltip, Data shown) of each loaded event."""
    events = details.events
    return [
        (
            str(events.index(r, COL_TYPE).data()),
            str(events.index(r, COL_TYPE).data(Qt.ItemDataRole.ToolTipRole)),
            str(events.index(r, COL_DATA).data()),
        )
        for r in range(events.rowCount())
    ]


async def test_a_cancelled_download_speaks_of_downloads_and_has_retry_in_its_details(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (core, window):
        hub.server.bytes_per_s = 256 * 1024  # still running when cancelled
        first = await core.pull_model(TINY_REPO, "tiny-Q8_0.gguf")
        tasks, details = window.tasks, window.tasks.details
        await until(lambda: tasks.model.row_of(first) is not None, what="the download's row")
        tasks.show_task(first)
        await until(lambda: details.state == "running", what=lambda: details.state)
        assert not details.retry_button.isVisible()  # running: nothing to retry
        # Progress rows are labelled in words too (they showed `download.progress` between
        # "download started" and "download cancelled"); the stored type is in the tooltip.
        await until(
            lambda: any(t == "progress" for t, _, _ in event_cells(details)),
            what=lambda: event_cells(details),
        )
        progress = next(c for c in event_cells(details) if c[0] == "progress")
        assert progress[1] == "Stored (and exported) as download.progress", progress
        assert " of 3.0 MiB (" in progress[2], progress
        await core.cancel(first)
        await until(lambda: details.state == "cancelled", what=lambda: details.state)
        await until(
            lambda: any(t == "download cancelled" for t, _, _ in event_cells(details)),
            what=lambda: event_cells(details),
        )
        cells = event_cells(details)
        types = [t for t, _, _ in cells]
        assert not any(t.startswith(("response.", "download.")) for t in types), types
        cancelling = next(c for c in cells if c[0] == "cancelling…")
        assert cancelling[1] == "Stored (and exported) as response.cancelling"
        assert cancelling[2].startswith("stopping the transfer at "), cancelling
        assert " of 3.0 MiB (" in cancelling[2], cancelling  # how far it had got
        assert not any("status=" in d for _, _, d in cells), cells
        # An ended download: no restart policy in its header, which a restart cannot touch.
        assert "on restart" not in details.header.text()
        assert "on restart" not in details.header.toolTip()
        assert details.retry_button.isVisible() and details.retry_button.isEnabled()
        # At 820 px, with Retry beside Copy id and Cancel, the header's line still fits: the
        # model and then the id give way in their middle, the state stays whole ("cance").
        window.resize(820, 600)
        header = details.header
        await until(
            lambda: header.sizeHint().width() <= header.contentsRect().width(),
            what=lambda: (header.sizeHint().width(), header.contentsRect().width(), header.text()),
        )
        assert "cancelled" in header.text()
        details.grab().save(str(tmp_path / "cancelled-details.png"))

        hub.server.bytes_per_s = None
        qtbot.mouseClick(details.retry_button, Qt.MouseButton.LeftButton)
        # A new download task (as the dialog's Retry makes), selected and shown.
        await until(lambda: details.task_id not in (None, first), what=lambda: details.task_id)
        again = details.task_id
        assert again is not None
        await until(lambda: tasks.selected_ids() == [again], what=tasks.selected_ids)
        await until(lambda: details.state == "completed", 30, what=lambda: details.state)
        assert not details.retry_button.isVisible()  # completed: nothing to retry
        row = await core.task(again)
        assert row["model"] == f"{TINY_REPO}:Q8_0"
        await until(
            lambda: "download completed" in [t for t, _, _ in event_cells(details)],
            what=lambda: event_cells(details),
        )


async def test_a_download_resumed_after_a_quit_says_its_run_from_its_first_start(
    qtbot: Any, tmp_path: Path, hub: Hub
) -> None:
    data = tmp_path / "data"
    hub.server.bytes_per_s = 256 * 1024  # ~12 s for its 3 MiB: still running at the quit
    async with open_app(qtbot, data, engine=FakeEngine()) as (core, window):
        task_id = await core.pull_model(TINY_REPO, "tiny-Q8_0.gguf")

        async def some_bytes() -> bool:
            rows = await core.task_event_rows(task_id, 0, 100)
            return any(r["type"] == "download.progress" for r in rows)

        await until(some_bytes, 30, "its first bytes")
    # Quit with the download unfinished (policy resume), then launched again.
    hub.server.bytes_per_s = None
    async with open_app(qtbot, data, engine=FakeEngine()) as (core, window):
        if window.dialog is not None:
            window.dialog.reject()  # the recovery report: "1 resumed"
        tasks, details = window.tasks, window.tasks.details
        await until(lambda: tasks.model.row_of(task_id) is not None, what="the download's row")
        tasks.show_task(task_id)
        await until(lambda: details.state == "completed", 30, what=lambda: details.state)
        row = await core.task(task_id)
        assert row["restarts"] == 1
        events = await core.task_event_rows(task_id, 0, 1000)
        began = next(e["created_at"] for e in events if e["type"] == "response.in_progress")
        assert began < row["started_at"]  # its last run started at the resume
        # From its first start to its end (it said the last run's seconds only).
        ran = f"ran {human_duration(row['finished_at'] - began)} from {clock(began)}"
        await until(lambda: ran in details.header.toolTip(), what=details.header.toolTip)
        assert "on restart" not in details.header.toolTip()
        assert "restarted 1×" in details.header.toolTip()
        await until(
            lambda: "download completed" in [t for t, _, _ in event_cells(details)],
            what=lambda: event_cells(details),
        )
        cells = event_cells(details)
        resumed = next(c for c in cells if c[0] == "download resumed")
        assert resumed[1] == "Stored (and exported) as response.resumed"
        assert resumed[2].startswith("going on after the restart, from "), resumed
        assert resumed[2].endswith(" of 3.0 MiB (8%)") or " of 3.0 MiB (" in resumed[2]
        assert not details.retry_button.isVisible()
        details.grab().save(str(tmp_path / "resumed-details.png"))
