"""The Source and Digest columns and Settings › Model sources, driven on the real MainWindow
over a real Core whose HOME holds the demo model in Ollama's and LM Studio's stores and the
Hugging Face cache (one blob there damaged), plus a manifest naming a missing blob."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from lmsp_desktop.gui.models.model_table import COL_DIGEST, COL_FOLDER, COL_SOURCE, COL_STATUS
from tests.integration.gui_windows import open_app, slow_engine
from tests.support import model_stores as stores
from tests.support.polling import until

pytestmark = pytest.mark.gui

OLLAMA_ID = "smollm2:135m"
HF_ID = "huggingfacetb/smollm2-135m-instruct-gguf:q4_1"
LMS_ID = "lmstudio-community/smollm2-135m-instruct-gguf:q4_1"


@pytest.fixture
def stores_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    stores.add_ollama_model(home, "smollm2", "135m")
    stores.add_ollama_model(home, "ghost", "7b", blob_hex="cd" * 32, write_blob=False)
    stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf", blob_hex="ab" * 32)
    stores.add_lmstudio_file(
        home, "lmstudio-community", "SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q4_1.gguf"
    )
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return home


def cells(window: Any, col: int) -> dict[str, str]:
    table = window.models.model
    return {table.model_id(r): str(table.index(r, col).data()) for r in range(table.rowCount())}


async def test_sources_and_published_digests_show_in_the_models_table(
    stores_home: Path, gui_app: tuple[Any, Any], qtbot: Any
) -> None:
    _core, window = gui_app
    window.nav.setCurrentRow(1)
    await until(lambda: window.models.isVisible(), what="the Models page")
    await until(lambda: {OLLAMA_ID, HF_ID, LMS_ID} <= set(cells(window, COL_SOURCE)))
    source = cells(window, COL_SOURCE)
    assert source[OLLAMA_ID] == "Ollama"
    assert source[HF_ID] == "Hugging Face"
    assert source[LMS_ID] == "LM Studio"
    assert source["smollm2-135m-instruct"] == "Demo"
    digest = cells(window, COL_DIGEST)
    assert digest[OLLAMA_ID] == "✓ matches Ollama"
    assert digest[HF_ID] == "✗ differs from HF"
    assert digest[LMS_ID].startswith("sha256:")  # LM Studio publishes none: our own digest
    status = cells(window, COL_STATUS)
    assert status[HF_ID] == "✗ digest differs"
    assert status[OLLAMA_ID].startswith("✓ verified")
    # The broken manifest is named on the page with what to do; the rest is listed.
    problems = window.models.problems
    assert problems.isVisible()
    assert "ghost:7b" in problems.text() and "ollama pull ghost:7b" in problems.text()
    # The damaged model is never offered to run (Try a prompt lists verified models only).
    await window.open_prompt()
    offered = [window.dialog.model.itemText(i) for i in range(window.dialog.model.count())]
    window.dialog.reject()
    assert HF_ID not in offered and OLLAMA_ID in offered


async def test_a_source_switched_off_in_settings_leaves_the_table(
    stores_home: Path, gui_app: tuple[Any, Any], qtbot: Any
) -> None:
    core, window = gui_app
    window.nav.setCurrentRow(1)
    await until(lambda: OLLAMA_ID in cells(window, COL_SOURCE), what="the Ollama model")
    window.open_settings()
    dialog = window.dialog
    dialog.tabs.setCurrentWidget(dialog.sources)
    box = dialog.sources.boxes["ollama"]
    assert box.isChecked()
    box.click()
    qtbot.mouseClick(
        dialog.buttons.button(QDialogButtonBox.StandardButton.Save), Qt.MouseButton.LeftButton
    )
    await until(lambda: not dialog.isVisible(), what=lambda: dialog.error.text() or "saved")
    await until(
        lambda: OLLAMA_ID not in cells(window, COL_SOURCE),
        what=lambda: f"the Ollama model to leave: {sorted(cells(window, COL_SOURCE))}",
    )
    assert LMS_ID in cells(window, COL_SOURCE)
    assert core.stored_settings.disabled_sources == ["ollama"]


async def test_a_hugging_face_file_deleted_then_downloaded_again_reads_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot: Any
) -> None:
    """The HF cache holds the demo under its published digest. Its Folder reads as the repo
    (it showed the snapshot's commit hash); deleted, its Digest says missing (it kept "✓
    matches"); downloaded again (a new file, a new mtime), it is verified afresh and matches
    (it showed "⚠ changed")."""
    home = tmp_path / "home"
    link = stores.add_hf_file(home, "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    async with open_app(qtbot, tmp_path / "data", engine=slow_engine()) as (core, window):
        window.nav.setCurrentRow(1)
        await until(
            lambda: cells(window, COL_DIGEST).get(HF_ID) == "✓ matches HF",
            what=lambda: cells(window, COL_DIGEST),
        )
        assert cells(window, COL_FOLDER)[HF_ID] == f"hf.co/{stores.HF_REPO}"

        blob = link.resolve()
        link.unlink()
        blob.unlink()
        await core.rescan_models()
        await until(
            lambda: cells(window, COL_STATUS).get(HF_ID, "").startswith("✗ missing"),
            what=lambda: cells(window, COL_STATUS),
        )
        assert cells(window, COL_DIGEST)[HF_ID] == "✗ file missing"

        # Downloaded again: huggingface_hub writes a new blob and links the snapshot to it.
        shutil.copyfile(stores.demo(), blob)
        link.symlink_to(os.path.relpath(blob, link.parent))
        await core.rescan_models()
        await until(
            lambda: cells(window, COL_STATUS).get(HF_ID, "").startswith("✓ verified"),
            what=lambda: cells(window, COL_STATUS),
        )
        assert cells(window, COL_DIGEST)[HF_ID] == "✓ matches HF"
