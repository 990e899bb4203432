"""The Models page over the real registry: digests, hashing progress, changed files, verify."""

from __future__ import annotations

import hashlib
import os
import struct

import pytest
from PySide6.QtGui import QGuiApplication

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.info import ModelEvent
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.gui.bridge import CoreBridge
from lmsp_desktop.gui.models.model_table import (
    COL_DIGEST,
    COL_LOADED,
    COL_NAME,
    COL_STATUS,
    ModelTableModel,
    Role,
)
from lmsp_desktop.gui.pages.models_page import ModelsPage
from tests.support.polling import until

pytestmark = pytest.mark.gui

# A GGUF v3 header with no tensors and no key-values: the smallest file the registry accepts
# as a model (the rest is random bytes to hash).
GGUF_HEADER = b"GGUF" + struct.pack("<IQQ", 3, 0, 0)


@pytest.fixture
async def setup(qtbot, core, store, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    blob = GGUF_HEADER + os.urandom(2 * 1024 * 1024)
    (folder / "tiny-model.Q4_0.gguf").write_bytes(blob)
    registry = ModelRegistry(store.db, [folder], include_demo=False, chunk_size=64 * 1024)
    core.registry = registry
    bridge = CoreBridge(core, interval_ms=20)
    page = ModelsPage(core)
    qtbot.addWidget(page)
    page.show()
    page.connect_bridge(bridge)
    progress: list[dict] = []
    bridge.model_progress.connect(progress.append)
    page.bridge = bridge
    yield page, registry, folder, blob, progress
    bridge.close()


def cell(page: ModelsPage, col: int) -> str:
    return page.model.index(0, col).data()


async def test_model_row_shows_digest_status_and_loaded(qtmodeltester, setup):
    page, registry, folder, blob, progress = setup  # noqa: RUF059
    await registry.scan()
    await page.load()
    tested = ModelTableModel(page.core)  # unparented: the page is deleted before the tester
    await tested.reload()
    qtmodeltester.check(tested, force_py=True)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    await until(lambda: cell(page, COL_STATUS).startswith("✓ verified"))
    assert cell(page, COL_NAME) == "tiny-model-q4-0" or cell(page, COL_NAME).startswith("tiny")
    assert cell(page, COL_DIGEST) == f"sha256:{digest[7:11]}…{digest[-4:]}"
    assert page.model.index(0, COL_DIGEST).data(3) == digest  # tooltip: the full digest
    page.table.selectRow(0)
    page.copy_digest()
    assert QGuiApplication.clipboard().text() == digest
    assert cell(page, COL_LOADED) == ""  # not loaded


async def test_changed_file_is_flagged_and_verify_offers_to_accept(setup):
    page, registry, folder, blob, progress = setup  # noqa: RUF059
    await registry.scan()
    await page.load()
    path = folder / "tiny-model.Q4_0.gguf"
    path.write_bytes(GGUF_HEADER + blob[len(GGUF_HEADER) :][::-1] + b"x")
    await page.rescan()
    await until(lambda: cell(page, COL_STATUS) == "⚠ changed")
    page.table.selectRow(0)
    assert page.explain.isVisible() and "will not run" in page.explain.text()
    await page.verify_selected()
    assert page.accept_box.isVisible()
    page.accept_box.buttons()[0].click()  # Accept the new file
    await until(lambda: cell(page, COL_STATUS).startswith("✓ verified"))
    path.unlink()
    await page.rescan()
    await until(lambda: cell(page, COL_STATUS) == "✗ missing")


async def test_hashing_progress_shows_as_a_bar_until_the_state_settles(setup):
    page, registry, folder, blob, progress = setup  # noqa: RUF059
    await registry.scan()
    await page.load()
    model_id = page.model.model_id(0)
    page.bridge.on_model(
        ModelEvent("progress", model_id, "hashing", bytes_done=62, bytes_total=100)
    )
    await until(lambda: cell(page, COL_STATUS) == "hashing 62%")
    assert page.model.index(0, COL_STATUS).data(Role.PROGRESS) == pytest.approx(0.62)
    page.table.grab()  # the delegate paints a progress bar without errors
    page.bridge.on_model(ModelEvent("state", model_id, "verified"))
    await until(lambda: cell(page, COL_STATUS).startswith("✓ verified"))
    assert page.model.index(0, COL_STATUS).data(Role.PROGRESS) is None


async def test_folder_column_and_idle_countdown_of_a_loaded_model(core, store, qtbot, tmp_path):
    from lmsp_desktop.gui.models.model_table import COL_FOLDER

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "tiny-model.Q4_0.gguf").write_bytes(GGUF_HEADER + os.urandom(64 * 1024))
    registry = ModelRegistry(store.db, [folder], include_demo=False)
    await registry.scan()
    # A model that finished its last task a minute ago (idle unload after 10 minutes).
    core.registry = registry
    model_id = (await registry.list_models())[0].id
    core.loaded[model_id] = "loaded"
    core.idle_left[model_id] = 540.0
    page = ModelsPage(core)
    qtbot.addWidget(page)
    await page.load()
    assert cell(page, COL_FOLDER) == str(folder)
    assert page.model.index(0, COL_FOLDER).data(3) == str(folder / "tiny-model.Q4_0.gguf")
    assert cell(page, COL_LOADED) == "loaded · 9 min"
    del core.idle_left[model_id]  # generating: no countdown
    page.model.tick()
    assert cell(page, COL_LOADED) == "loaded"
    # The sidebar's "in memory": the file's size until its engine process says more.
    size = (folder / "tiny-model.Q4_0.gguf").stat().st_size
    assert page.model.in_memory() == [(model_id, size, "loaded")]
    core.engine_memory[model_id] = 700 << 20  # weights + KV cache + buffers
    assert page.model.in_memory() == [(model_id, 700 << 20, "loaded")]


async def test_files_that_are_not_models_are_never_verified(core, store, qtbot, tmp_path):
    from lmsp_desktop.core.models.demo import demo_model_path

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "broken.gguf").write_bytes(os.urandom(256 * 1024))
    demo = demo_model_path()
    assert demo is not None
    with demo.open("rb") as src:  # a truncated copy: a perfect header, half the tensors
        (folder / "half.gguf").write_bytes(src.read(demo.stat().st_size // 2))
    registry = ModelRegistry(store.db, [folder], include_demo=False)
    await registry.scan()
    core.registry = registry
    page = ModelsPage(core)
    qtbot.addWidget(page)
    await page.load()
    for row in range(page.model.rowCount()):
        assert page.model.index(row, COL_STATUS).data() == "✗ not a model"
    tips = [page.model.index(r, COL_STATUS).data(3) for r in range(page.model.rowCount())]
    # The cut copy's header is whole: its tooltip says what is wrong, not "cannot read".
    assert any("shorter than its tensors need" in tip for tip in tips), tips
    assert sum("cannot read the GGUF header" in tip for tip in tips) == 1, tips
    assert any("magic" in tip for tip in tips), tips
    for info in await registry.list_models():
        with pytest.raises(LmspError) as refused:
            await registry.path_for_run(info.id)
        assert refused.value.code == "model_invalid" and refused.value.status == 400


async def test_verify_selected_says_what_it_is_doing_and_the_outcome(setup):
    """Over the real registry: a click on Verify selected shows "Verifying NAME…", then that
    it is verified, or why not."""
    page, registry, folder, blob, progress = setup  # noqa: RUF059
    await registry.scan()
    await page.load()
    await until(lambda: cell(page, COL_STATUS).startswith("✓ verified"))
    name = page.model.model_id(0)
    shown: list[str] = []
    set_text = page.status.setText
    page.status.setText = lambda text: (shown.append(text), set_text(text))  # type: ignore[method-assign]
    page.table.selectRow(0)
    page.verify_button.click()
    await until(lambda: len(shown) >= 2, what=lambda: str(shown))
    assert shown[0] == f"Verifying {name}…"
    assert page.status.text() == f"{name} verified: its digest matches the file."
    assert page.status.isVisible()

    (folder / "tiny-model.Q4_0.gguf").write_bytes(GGUF_HEADER + b"y" * len(blob))
    page.verify_button.click()
    await until(lambda: "failed" in page.status.text(), what=page.status.text)
    assert page.status.text() == (
        f"{name} failed verification: the file no longer matches its digest."
    )
    page.accept_box.close()


async def test_a_failed_load_marks_the_row_until_the_model_loads(setup, store):
    """A task fails with the engine's model_load_failed (real store, real bridge): the row
    says so with the engine's message as tooltip; a later load clears it."""
    from lmsp_desktop.core.storage.tasks import NewTask

    page, registry, folder, blob, progress = setup  # noqa: RUF059
    await registry.scan()
    await page.load()
    model_id = page.model.model_id(0)
    request = {"input": "Hi", "temperature": 0.7, "top_p": 0.95}
    task_id = (await store.tasks.create(NewTask(model=model_id, request=request))).task_id
    await store.tasks.mark_loading(task_id)
    await store.tasks.fail(task_id, "model_load_failed", "llama_model_load: tensor data is short")
    shown = lambda: cell(page, COL_LOADED)  # noqa: E731
    await until(lambda: shown() == "✗ failed to load", what=shown)
    assert page.model.index(0, COL_LOADED).data(3) == "llama_model_load: tensor data is short"
    page.core.announce_loaded(model_id, "loaded")
    await until(lambda: shown().startswith("loaded"), what=shown)
    page.core.announce_loaded(model_id, "unloaded")
    await until(lambda: shown() == "", what=shown)
