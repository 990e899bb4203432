"""The Models page's Verify selected and Rescan, as a GUI walk found them: Verify of a file
never verified agrees with Rescan (nothing to accept), the page's lines and Load settings
panel follow the row once a changed file is accepted, and Rescan keeps the selection. Real
core (store, registry, fitter reading real GGUF headers), real MainWindow, real files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QItemSelectionModel
from PySide6.QtWidgets import QMessageBox

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.gui.models.model_table import COL_STATUS
from tests.integration.gui_windows import open_app
from tests.support.polling import until
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_registry import touch_later

pytestmark = pytest.mark.gui
BIG = {"blk.0.w": (2048, 1024), "norm": (8,)}  # 8 MiB of weights: the estimate shows it


def row_of(window: Any, model_id: str) -> int | None:
    table = window.models.model
    return next((r for r in range(table.rowCount()) if table.model_id(r) == model_id), None)


def status(window: Any, model_id: str) -> str:
    row = row_of(window, model_id)
    return "" if row is None else str(window.models.model.index(row, COL_STATUS).data())


def select(window: Any, model_id: str) -> None:
    row = row_of(window, model_id)
    assert row is not None, model_id
    window.models.table.selectionModel().select(
        window.models.model.index(row, 0),
        QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows,
    )


def selected(window: Any) -> list[str]:
    return [window.models.model.model_id(r) for r in window.models.selected_rows()]


def accept_box(window: Any) -> QMessageBox | None:
    box = getattr(window.models, "accept_box", None)
    return box if box is not None and box.isVisible() else None


def replace(path: Path, data: bytes) -> None:
    """Another file in its place (a new inode, a later time), as a copy over it would be."""
    path.unlink()
    path.write_bytes(data)
    touch_later(path)


async def test_verify_of_a_file_never_verified_takes_the_new_file_as_rescan_does(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / "broken.gguf"
    path.write_bytes(os.urandom(64 * 1024))  # not a model: never verified
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (_core, window):
        window.nav.setCurrentRow(1)
        await until(lambda: status(window, "broken") == "✗ not a model", what="the row")
        replace(path, b"GGUF" + os.urandom(64 * 1024))  # another file that is not one
        select(window, "broken")
        window.models.verify_button.click()
        await until(lambda: "failed" in window.models.status.text(), what="the outcome")
        # Nothing to accept: it was never a verified model's file. Read afresh, as Rescan does.
        assert accept_box(window) is None
        assert "broken failed verification:" in window.models.status.text()
        assert "magic" not in window.models.status.text()  # the new file's reason, not the old
        assert status(window, "broken") == "✗ not a model"
        # Replaced by a model now: Verify selected verifies it (Rescan would too).
        path.unlink()
        write_gguf(path)
        touch_later(path)
        window.models.verify_button.click()
        await until(lambda: status(window, "broken").startswith("✓ verified"), what="verified")
        assert accept_box(window) is None
        assert window.models.status.text() == "broken verified: its digest matches the file."


async def test_a_changed_file_accepted_updates_the_line_and_the_estimate(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    path = write_gguf(folder / "tiny.gguf", context_length=2048)
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (core, window):
        page, panel = window.models, window.models.memory
        window.nav.setCurrentRow(1)
        await until(lambda: status(window, "tiny").startswith("✓ verified"), what="verified")
        select(window, "tiny")
        await until(lambda: "trained 2,048" in panel.runs_with.text(), what=panel.runs_with.text)
        assert "weights 0 MiB" in panel.estimate.text()

        async def changed_and_refused(context: int, tensors: dict[str, Any]) -> QMessageBox:
            write_gguf(path, context_length=context, tensors=tensors)  # replaced on purpose
            touch_later(path)
            page.rescan_button.click()
            await until(lambda: status(window, "tiny") == "⚠ changed", what="changed")
            page.verify_button.click()
            box = await until(lambda: accept_box(window), what="the question")
            assert page.status.text() == (
                "tiny failed verification: the file no longer matches its digest."
            )
            return box

        # Accepted in the question: the line and the panel say what the new file is.
        box = await changed_and_refused(8192, BIG)
        box.buttons()[0].click()  # Accept the new file
        await until(lambda: status(window, "tiny").startswith("✓ verified"), what="accepted")
        await until(lambda: "failed" not in page.status.text(), what=page.status.text)
        assert page.status.text() == "tiny verified: its digest matches the file."
        await until(lambda: "trained 8,192" in panel.runs_with.text(), what=panel.runs_with.text)
        await until(lambda: "weights 8 MiB" in panel.estimate.text(), what=panel.estimate.text)
        assert selected(window) == ["tiny"]

        # Refused in the question, then accepted elsewhere (`lmsp-desktop models verify tiny
        # --accept-new` through the service calls this same registry verify): the line and
        # the panel follow the row, no "failed verification" left behind.
        box = await changed_and_refused(4096, {"blk.0.w": (4096, 1024), "norm": (8,)})
        box.buttons()[1].click()  # Keep refusing it
        assert "failed" in page.status.text()
        await core.verify_model("tiny", accept_new=True)
        await until(lambda: status(window, "tiny").startswith("✓ verified"), what="accepted")
        await until(lambda: "failed" not in page.status.text(), what=page.status.text)
        assert page.status.text() == "tiny verified: its digest matches the file."
        await until(lambda: "trained 4,096" in panel.runs_with.text(), what=panel.runs_with.text)
        await until(lambda: "weights 16 MiB" in panel.estimate.text(), what=panel.estimate.text)


async def test_rescan_keeps_the_selected_model_selected(qtbot: Any, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("alpha", "beta"):
        write_gguf(folder / f"{name}.gguf", payload=name.encode())
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (_core, window):
        page = window.models
        window.nav.setCurrentRow(1)
        await until(lambda: status(window, "beta").startswith("✓ verified"), what="verified")
        select(window, "beta")
        await until(lambda: page.memory.model_id == "beta", what="its Load settings")
        write_gguf(folder / "aardvark.gguf", payload=b"new")  # listed first: rows move down
        await page.rescan()  # what the Rescan button runs
        await until(lambda: row_of(window, "aardvark") is not None, what="the new file")
        assert selected(window) == ["beta"]
        await until(lambda: page.memory.model_id == "beta", what=lambda: page.memory.model_id)
        await page.rescan()  # nothing new
        await page.model.reload()  # the reload the scan's news schedules
        assert selected(window) == ["beta"]


async def test_a_verified_model_replaced_by_a_cut_copy_is_not_offered_as_new(
    qtbot: Any, tmp_path: Path
) -> None:
    """The GUI walk: Verify selected on a verified model whose file was replaced by a cut
    copy asked whether to accept the new file, its default button Accept; only after
    accepting did the page say the file was too short. The cut is said at once, and no
    question is asked: a cut file is no candidate for the model's new file."""
    folder = tmp_path / "models"
    folder.mkdir()
    path = write_gguf(folder / "tiny.gguf", tensors=BIG)
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (core, window):
        page = window.models
        window.nav.setCurrentRow(1)
        await until(lambda: status(window, "tiny").startswith("✓ verified"), what="verified")
        whole = path.read_bytes()
        replace(path, whole[: len(whole) // 2])  # a copy cut halfway, over the model
        select(window, "tiny")
        page.verify_button.click()
        await until(lambda: "failed" in page.status.text(), what="the outcome")
        assert accept_box(window) is None, "a cut file was offered as the model's new file"
        line = page.status.text()
        assert "not a whole model" in line and "shorter than its tensors need" in line, line
        assert "Put the verified file back" in line
        await until(lambda: status(window, "tiny") == "⚠ changed", what="the row")
        info = await core.registry.get("tiny")
        assert info.meta["observed_size_bytes"] == len(whole) // 2
        # Put back: verified again, nothing left of what was observed.
        replace(path, whole)
        page.verify_button.click()
        await until(lambda: status(window, "tiny").startswith("✓ verified"), what="verified")
        info = await core.registry.get("tiny")
        assert not {"observed_digest", "observed_size_bytes", "observed_error"} & set(info.meta)
