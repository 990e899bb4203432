"""The download dialog's status line over a scripted core: a memory estimate that answers
after Download was clicked does not replace "Downloading …" (the dialog looked as if the click
had done nothing), and a repo's downloads count is on its own line, never cut."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from lmsp_desktop.core.downloads.hub import GgufChoice, HubFile
from lmsp_desktop.core.models.memory import Plan
from lmsp_desktop.gui.dialogs.download_dialog import DownloadDialog
from tests.support.polling import until

pytestmark = pytest.mark.gui
REPO = "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF"
FILE = "Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf"


class SlowHub:
    """The dialog's part of the core: one repo, one file, an estimate that waits."""

    def __init__(self) -> None:
        self.estimate_asked = asyncio.Event()
        self.answer_estimate = asyncio.Event()
        self.pulled: list[tuple[str, str]] = []
        self.searched: list[str] = []

    async def hub_search(self, query: str) -> list[dict[str, Any]]:
        self.searched.append(query)
        return [{"id": REPO, "downloads": 123456}]

    async def hub_models(self, repo: str) -> list[GgufChoice]:
        return [GgufChoice((HubFile(FILE, 4_683_074_240, None),), "Q4_K_M")]

    async def hub_memory_plan(self, repo: str, choice: GgufChoice) -> Plan | None:
        self.estimate_asked.set()
        await self.answer_estimate.wait()
        return None  # the header could not be read

    async def pull_model(self, repo: str, selector: str) -> str:
        self.pulled.append((repo, selector))
        return "dl_1"

    async def hub_downloaded(self, repo: str, choices: list[GgufChoice]) -> set[str]:
        return set()

    def hub_token_kept(self) -> bool:
        return False

    async def models(self) -> list[Any]:
        return []  # no local copy of anything

    def subscribe(self, listener: Any) -> None:
        pass

    def unsubscribe(self, listener: Any) -> None:
        pass


async def test_an_estimate_answering_after_the_click_leaves_downloading_said(qtbot) -> None:
    hub = SlowHub()
    dialog = DownloadDialog(hub)  # type: ignore[arg-type]
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.query.setText("qwen coder")
    await dialog.search()
    assert dialog.repos.item(0).text().split("\n") == [REPO, "123,456 downloads"]
    widest = max(dialog.fontMetrics().horizontalAdvance(line) for line in [REPO, "123,456"])
    assert dialog.repos.viewport().width() >= widest  # the id whole at the dialog's size
    dialog.repos.setCurrentRow(0)
    await until(lambda: dialog.files.rowCount() == 1)
    dialog.files.selectRow(0)
    await hub.estimate_asked.wait()
    assert await dialog.download() == "dl_1"
    assert hub.pulled == [(REPO, FILE)]
    assert dialog.status.text().startswith(f"Downloading {FILE}")
    hub.answer_estimate.set()  # the header's answer comes after the click
    await until(lambda: dialog.files.item(0, 3).text().split("\n")[-1].startswith("unknown"))
    assert dialog.status.text().startswith(f"Downloading {FILE}"), dialog.status.text()
    assert dialog.files.item(0, 3).text().startswith("↓ downloading…\n")  # its cell too


async def test_opened_again_the_search_box_has_the_focus_and_enter_searches(qtbot) -> None:
    """The walk: Download… opened a second time had the focus on Close, so typing a query
    and pressing Enter closed the dialog."""
    hub = SlowHub()
    dialog = DownloadDialog(hub)  # type: ignore[arg-type]
    qtbot.addWidget(dialog)
    dialog.open()  # as the Models page opens it, the same dialog each time
    await until(dialog.isVisible)
    close = dialog.buttons.button(QDialogButtonBox.StandardButton.Close)
    qtbot.mouseClick(close, Qt.MouseButton.LeftButton)  # closed with the mouse
    await until(lambda: not dialog.isVisible())
    dialog.open()
    await until(dialog.isVisible)
    typed_into = dialog.focusWidget()
    assert typed_into is dialog.query, typed_into
    qtbot.keyClicks(typed_into, "qwen coder")
    qtbot.keyClick(typed_into, Qt.Key.Key_Return)
    await until(lambda: dialog.repos.count() == 1, what=dialog.status.text)
    assert dialog.isVisible()  # Enter searched; it did not close the dialog
    assert hub.searched == ["qwen coder"]  # once: no default button clicked as well
    assert dialog.repos.item(0).text().startswith(REPO)
