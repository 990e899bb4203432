"""The Models page keeps what tells copies of one model apart at ordinary sizes. A walk with
the demo model in four places (Ollama, the Hugging Face cache, LM Studio, and the app's own)
declaring a 131,072-token context found, at the first launch's 1200×780, the Digest column
("✓ matches HF/Ollama", GUI.md's third edition) dropped as soon as a Context cell read
"8,192 of 131,072"; at 1000 px Source went before Parameters, though Source was the one
thing telling the four rows apart (their names cut to `bartowsk…guf:q4_1`, Parameters
134.5 M each). Real core (store, registry reading real GGUF files in the three stores), real
MainWindow at real sizes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtWidgets import QStyleOptionViewItem

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.model_table import (
    COL_ARCH,
    COL_CONTEXT,
    COL_DIGEST,
    COL_PARAMS,
    COL_SOURCE,
    HEADERS,
)
from tests.integration.gui_windows import open_app
from tests.integration.test_gui_models_columns import settle
from tests.support import model_stores as stores
from tests.support.long_context_model import copy_long_context_demo_model
from tests.support.polling import until

pytestmark = pytest.mark.gui

OLLAMA_ID = "smollm2:135m"
HF_REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
HF_ID = "bartowski/smollm2-135m-instruct-gguf:q4_1"
LMS_ID = "lmstudio-community/smollm2-135m-instruct-gguf:q4_1"
COPIES = (OLLAMA_ID, HF_ID, LMS_ID)


@pytest.fixture
def four_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    long = copy_long_context_demo_model(tmp_path / "long.gguf", 131_072)
    home = tmp_path / "home"
    stores.add_ollama_model(home, "smollm2", "135m", long)
    stores.add_hf_file(home, "SmolLM2-135M-Instruct-Q4_1.gguf", long, repo=HF_REPO)
    stores.add_lmstudio_file(
        home,
        "lmstudio-community",
        "SmolLM2-135M-Instruct-GGUF",
        "SmolLM2-135M-Instruct-Q4_1.gguf",
        long,
    )
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return home


def cells(window: Any, col: int, role: int = Qt.ItemDataRole.DisplayRole) -> dict[str, str]:
    table = window.models.model
    return {table.model_id(r): str(table.index(r, col).data(role)) for r in range(table.rowCount())}


def shown(window: Any) -> list[str]:
    header = window.models.table.horizontalHeader()
    return [HEADERS[c] for c in range(header.count()) if not header.isSectionHidden(c)]


async def at_width(window: Any, width: int) -> list[str]:
    window.resize(width, 780)
    await settle()
    assert window.models.table.horizontalScrollBar().maximum() == 0  # never sideways
    return shown(window)


async def test_source_and_the_digest_verdict_stay_at_ordinary_sizes(
    four_copies: Path, qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path / "data", engine=FakeEngine()) as (_core, window):
        window.nav.setCurrentRow(1)
        await until(
            lambda: all(cells(window, COL_DIGEST).get(m, "").startswith("✓") for m in COPIES[:2]),
            60,
            lambda: cells(window, COL_DIGEST),
        )
        await until(
            lambda: cells(window, COL_CONTEXT).get(HF_ID) == "8,192 of 131,072",
            30,
            lambda: cells(window, COL_CONTEXT),
        )
        sources = cells(window, COL_SOURCE)
        assert {sources[m] for m in COPIES} == {"Ollama", "Hugging Face", "LM Studio"}
        # Parameters tells nothing apart here: one value for every copy.
        assert len({cells(window, COL_PARAMS)[m] for m in COPIES}) == 1

        # The first launch's size: Source, the publishers' verdicts and every Context shown.
        columns = await at_width(window, 1200)
        for needed in ("Source", "Digest", "Context", "Quantization"):
            assert needed in columns, (needed, columns)
        # At 1000 px Source and Digest outlast Parameters and Architecture.
        columns = await at_width(window, 1000)
        for needed in ("Source", "Digest", "Context", "Quantization"):
            assert needed in columns, (needed, columns)
        header = window.models.table.horizontalHeader()
        assert header.isSectionHidden(COL_PARAMS) or not header.isSectionHidden(COL_SOURCE)
        # The smallest window: Source is the last of the header facts to go but Quantization,
        # Context and Size.
        columns = await at_width(window, 900)
        for needed in ("Source", "Context", "Quantization"):
            assert needed in columns, (needed, columns)
        assert header.isSectionHidden(COL_ARCH) and header.isSectionHidden(COL_PARAMS)
        # A Context column narrowed for room says the shorter form, not a cut one.
        page = window.models
        row = page.model.row_of(HF_ID)
        assert row is not None
        option = QStyleOptionViewItem()
        page.context_delegate.initStyleOption(option, page.model.index(row, COL_CONTEXT))
        option.rect = QRect(0, 0, header.sectionSize(COL_CONTEXT), 20)
        # (The long form where the column has its room; the sidebar's width follows the font,
        # so at 900 px it may not.)
        assert page.context_delegate.shown_text(option) in ("8,192 of 131,072", "8,192 / 131k")
        option.rect = QRect(0, 0, option.fontMetrics.horizontalAdvance("8,192 / 131k") + 8, 20)
        assert page.context_delegate.shown_text(option) == "8,192 / 131k"
