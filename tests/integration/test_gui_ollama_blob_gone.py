"""An Ollama model whose blob is removed (a pruned store) stays in the Models table as
"✗ missing", and the notice under the table agrees with it: a walk found the notice saying
"…it is not listed" beside the listed row. Real core whose HOME holds the demo model in
Ollama's store, real MainWindow, the real Rescan button."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.model_table import COL_STATUS
from tests.integration.gui_windows import open_app
from tests.support import model_stores as stores
from tests.support.polling import until

pytestmark = pytest.mark.gui
OLLAMA_ID = "smollm2:135m"


def status(window: Any) -> str:
    table = window.models.model
    row = table.row_of(OLLAMA_ID)
    return "" if row is None else str(table.index(row, COL_STATUS).data())


async def test_a_removed_ollama_blob_is_missing_and_the_notice_does_not_say_unlisted(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    blob = stores.add_ollama_model(home, "smollm2", "135m")
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (_core, window):
        page = window.models
        window.nav.setCurrentRow(1)
        await until(lambda: status(window).startswith("✓ verified"), 30, lambda: status(window))
        assert not page.problems.isVisible()
        blob.unlink()  # `ollama rm` of another tag, a pruned store
        qtbot.mouseClick(page.rescan_button, Qt.MouseButton.LeftButton)
        await until(lambda: status(window) == "✗ missing", 30, lambda: status(window))
        await until(page.problems.isVisible, what="the notice under the table")
        notice = page.problems.text()
        assert OLLAMA_ID in notice and f"ollama pull {OLLAMA_ID}" in notice, notice
        # The row is listed (as missing): the notice says what is true of it.
        assert "not listed" not in notice, notice
        assert f"{OLLAMA_ID} cannot run" in notice, notice
