"""What the walk of the Models page in a real window found, on the real MainWindow over a real
Core whose HOME holds the demo model in Ollama's store and the Hugging Face cache (so the
table has the long hub names a new user's table has): the Source column shows at the first
launch's size, a crashed engine's row does not push the table into scrolling sideways at
900 px, and the Load settings panel shows no stale values once no model is selected."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.gui.models.model_table import COL_LOADED, COL_NAME, COL_SOURCE, COL_STATUS
from tests.integration.gui_windows import client_token, post_background
from tests.support import model_stores as stores
from tests.support.polling import until

pytestmark = pytest.mark.gui

OLLAMA_ID = "smollm2:135m"
HF_ID = "huggingfacetb/smollm2-135m-instruct-gguf:q4_1"
DEMO_ID = "smollm2-135m-instruct"


@pytest.fixture
def walk_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    stores.add_ollama_model(home, "smollm2", "135m")
    stores.add_hf_file(home, "SmolLM2-135M-Instruct-Q4_1.gguf")
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    return home


def row_of(window: Any, model_id: str) -> int | None:
    table = window.models.model
    return next((r for r in range(table.rowCount()) if table.model_id(r) == model_id), None)


def cell(window: Any, model_id: str, col: int) -> str:
    row = row_of(window, model_id)
    return "" if row is None else str(window.models.model.index(row, col).data())


def overflow(window: Any) -> str:
    """Empty when the models table shows all its visible columns without scrolling
    sideways; else what the columns take against the room."""
    table = window.models.table
    header = table.horizontalHeader()
    if header.length() <= table.viewport().width() and table.horizontalScrollBar().maximum() == 0:
        return ""
    widths = {
        window.models.model.headerData(c, header.orientation()): header.sectionSize(c)
        for c in range(header.count())
        if not header.isSectionHidden(c)
    }
    return f"columns {widths} take {header.length()} px of {table.viewport().width()}"


async def test_the_source_column_shows_at_the_first_launch_size(
    walk_home: Path, gui_app: tuple[Any, Any]
) -> None:
    _core, window = gui_app
    window.resize(1200, 780)  # MainWindow.FIRST_SIZE: what a new user sees first
    window.nav.setCurrentRow(1)
    await until(lambda: window.models.table.viewport().width() > 900, what="the Models page")
    await until(lambda: cell(window, HF_ID, COL_SOURCE) == "Hugging Face", what="the hub model")
    assert cell(window, OLLAMA_ID, COL_SOURCE) == "Ollama"
    window.models.fit_columns()  # as after any resize or new rows
    header = window.models.table.horizontalHeader()
    assert not header.isSectionHidden(COL_SOURCE), window.models.fitter.hidden_columns()
    await until(lambda: not overflow(window), 10, lambda: overflow(window))


async def test_a_crashed_engine_keeps_the_models_table_within_900_px(
    walk_home: Path, gui_app: tuple[Any, Any]
) -> None:
    core, window = gui_app
    window.resize(900, 600)
    window.nav.setCurrentRow(1)
    await until(
        lambda: cell(window, HF_ID, COL_STATUS).startswith("✓ verified"),
        60,
        lambda: cell(window, HF_ID, COL_STATUS),
    )
    token = await client_token(core)
    await post_background(
        core, token, model=HF_ID, input="Write a long story.", max_output_tokens=300
    )
    await until(
        lambda: core.runner.engine_pid(HF_ID) is not None and core.runner._active,
        120,
        "the task to be generating",
    )
    pid = core.runner.engine_pid(HF_ID)
    assert pid is not None and pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    await until(
        lambda: "crashed (SIGKILL, " in cell(window, HF_ID, COL_LOADED),
        60,
        lambda: cell(window, HF_ID, COL_LOADED),
    )
    window.models.fit_columns()
    await until(lambda: not overflow(window), 10, lambda: overflow(window))


async def test_at_the_first_launch_size_loading_a_model_keeps_source_and_unloading_brings_back(
    walk_home: Path, gui_app: tuple[Any, Any]
) -> None:
    """The walk at 1200×780: Context and Parameters never showed, and once a model loaded
    ("loaded · unloads in 10 min") Source went, and stayed gone after the unload until a
    relaunch. Now all three show, and stay as the model loads (the long names are cut
    first, whole on hover) and unloads."""
    core, window = gui_app
    window.resize(1200, 780)  # MainWindow.FIRST_SIZE
    window.nav.setCurrentRow(1)
    page = window.models
    header = page.table.horizontalHeader()
    await until(lambda: page.table.viewport().width() > 900, what="the Models page")
    await until(
        lambda: all(page.model.info(r).state == "verified" for r in range(3)),
        60,
        lambda: [cell(window, m, COL_STATUS) for m in (HF_ID, OLLAMA_ID, DEMO_ID)],
    )

    def shown() -> set[str]:
        page.fit_columns()  # as the next frame does
        return {
            str(page.model.headerData(c, Qt.Orientation.Horizontal))
            for c in range(header.count())
            if not header.isSectionHidden(c)
        }

    facts = {"Source", "Context", "Parameters"}
    await until(lambda: facts <= shown(), 10, shown)
    assert not overflow(window), overflow(window)

    page.table.selectRow(row_of(window, DEMO_ID))
    await until(lambda: page.load_button.text() == "Load", what=page.load_button.text)
    page.load_button.click()
    await until(lambda: cell(window, DEMO_ID, COL_LOADED).startswith("loaded"), 120, "loaded")
    await until(lambda: cell(window, DEMO_ID, COL_LOADED) == "loaded · 10 min", 10, "countdown")
    assert facts <= shown() and not overflow(window), overflow(window)  # the columns stay

    page.load_button.click()  # Unload
    await until(lambda: core.model_loaded_state(DEMO_ID) == "unloaded", 60, "unloaded")
    await until(lambda: cell(window, DEMO_ID, COL_LOADED) == "", 10, "the Loaded cell empty")
    await until(lambda: facts <= shown(), 10, shown)  # back without a relaunch
    assert not overflow(window), overflow(window)


@pytest.fixture
def tagged_twice(walk_home: Path) -> Path:
    """The Ollama blob tagged `latest` too, as `ollama pull smollm2` beside
    `ollama pull smollm2:135m` leaves it: one file, two names."""
    stores.add_ollama_model(walk_home, "smollm2", "latest")
    return walk_home


async def test_a_blob_tagged_twice_shows_both_names_in_one_row(
    tagged_twice: Path, gui_app: tuple[Any, Any]
) -> None:
    """/api/tags lists `smollm2:135m` and `smollm2:latest` (both run the model), as `ollama
    list` does; the Models page showed one row named `smollm2:135m` only, so a user who
    pulled `smollm2` did not find it. The row names the other tag too: at 900 px cut in
    its middle rather than a column dropped, and whole on hover."""
    core, window = gui_app
    window.resize(900, 600)
    window.nav.setCurrentRow(1)
    await until(lambda: row_of(window, OLLAMA_ID) is not None, what="the Ollama model")
    table = window.models.model
    ollama_rows = [r for r in range(table.rowCount()) if table.info(r).source == "ollama"]
    assert len(ollama_rows) == 1  # one file, one row (its settings, digest and load are one)
    assert cell(window, OLLAMA_ID, COL_NAME) == "smollm2:135m (also :latest)"
    tip = str(table.index(row_of(window, OLLAMA_ID), COL_NAME).data(Qt.ItemDataRole.ToolTipRole))
    assert tip.startswith("smollm2:135m, also smollm2:latest:") and "blobs" in tip
    token = await client_token(core)
    async with (
        aiohttp.ClientSession(core.url) as http,
        http.get("/api/tags", headers={"Authorization": f"Bearer {token}"}) as answer,
    ):
        tags = {m["name"] for m in (await answer.json())["models"]}
    assert {"smollm2:135m", "smollm2:latest"} <= tags  # what the row says the API answers to
    window.models.fit_columns()
    await until(lambda: not overflow(window), 10, lambda: overflow(window))
    name_width = window.models.table.horizontalHeader().sectionSize(COL_NAME)
    assert name_width >= window.models.name_least  # cut no further than its least


async def test_the_load_settings_panel_forgets_the_last_model_when_none_is_selected(
    walk_home: Path, gui_app: tuple[Any, Any]
) -> None:
    _core, window = gui_app
    window.nav.setCurrentRow(1)
    await until(lambda: row_of(window, HF_ID) is not None, what="the hub model")
    panel = window.models.memory
    assert not panel.isEnabled() and panel.runs_with.text().startswith("Select a model")
    window.models.table.selectRow(row_of(window, HF_ID))
    await until(lambda: panel.last_plan is not None, 30, "the hub model's estimate")
    panel.context.setValue(2048)
    panel.kv_type.setCurrentText("q8_0")
    await until(lambda: "2,048 tokens" in panel.runs_with.text(), what=panel.runs_with.text)

    window.models.table.clearSelection()
    await until(lambda: not panel.isEnabled(), what="the panel greyed out")
    # Greyed out, it showed 2048 tokens and q8_0 still: read as the defaults, or as the
    # model's, by someone who had not saved them.
    assert panel.title() == "Load settings"
    assert panel.context.text() == "auto (up to 8,192)"  # the default rule's cap
    assert panel.kv_type.currentText() == "f16"
    assert panel.runs_with.text().startswith("Select a model")
    assert panel.estimate.text() == ""
