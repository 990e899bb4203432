"""A file's memory estimate stays in its row when the repo is listed again: one answering
while the list was redrawn was lost (its cell said "memory: select to check" for good, its
status line "checking what it needs…"), as was one made before the dialog was reopened."""

from __future__ import annotations

import pytest

from lmsp_desktop.gui.dialogs.download_dialog import COL_FIT, DownloadDialog
from tests.support.polling import until
from tests.unit.gui.test_download_dialog import SlowHub

pytestmark = pytest.mark.gui


async def listed(dialog: DownloadDialog) -> None:
    dialog.repos.setCurrentRow(-1)
    dialog.repos.setCurrentRow(0)
    await until(lambda: "GGUF model" in dialog.status.text(), what=dialog.status.text)


async def test_an_estimate_answering_while_the_repo_is_listed_again_is_kept(qtbot) -> None:
    hub = SlowHub()
    dialog = DownloadDialog(hub)  # type: ignore[arg-type]
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.query.setText("qwen coder")
    await dialog.search()
    await listed(dialog)
    dialog.files.selectRow(0)
    await hub.estimate_asked.wait()
    await listed(dialog)  # the dialog reopened, the repo picked again: a new list
    hub.answer_estimate.set()
    cell = lambda: dialog.files.item(0, COL_FIT).text()  # noqa: E731
    await until(lambda: cell() == "unknown: header unreadable", what=cell)
    dialog.files.selectRow(0)
    assert "no memory estimate" in dialog.status.text(), dialog.status.text()
    await listed(dialog)  # and listed once more, its answer known: shown at once
    assert cell() == "unknown: header unreadable"
