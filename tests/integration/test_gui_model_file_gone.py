"""A model file deleted behind the app's back reads "✗ missing" on the Models page as soon as
the page reads the file (the selected row's estimate, the contexts it reads while shown), not
"✗ not a model" or "✓ verified" until Rescan or Verify. Real core (store, registry, fitter),
real MainWindow, real files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from tests.integration.gui_windows import open_app
from tests.integration.test_gui_model_verify_flows import select, status
from tests.support.polling import until
from tests.unit.core.test_models_gguf_meta import write_gguf

pytestmark = pytest.mark.gui


async def test_a_deleted_file_reads_missing_once_the_page_reads_it(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    tiny = write_gguf(folder / "tiny.gguf")
    broken = folder / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(64 * 1024))  # not a model
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (core, window):
        page = window.models
        window.nav.setCurrentRow(1)
        await until(lambda: status(window, "tiny").startswith("✓ verified"), what="verified")
        await until(lambda: status(window, "broken") == "✗ not a model", what="not a model")
        select(window, "tiny")  # its estimate shown: the header read and kept
        await until(lambda: "fits" in page.memory.estimate.text(), what=page.memory.estimate.text)

        broken.unlink()
        select(window, "broken")
        await until(lambda: status(window, "broken") == "✗ missing", what="broken missing")
        assert "no longer where it was found" in page.explain.text()

        tiny.unlink()
        select(window, "tiny")
        await until(lambda: status(window, "tiny") == "✗ missing", what="tiny missing")
        assert (await core.registry.get("tiny")).state == "missing"
        assert "no longer where it was found" in page.explain.text()
