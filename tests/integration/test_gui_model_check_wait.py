"""A task queued for a model whose file is still being hashed says so in its Output tab (it
waits for the check, core/models/scan_gate.py), then runs. A real core hashing a real file
(its read held), the real MainWindow."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models import hashing
from lmsp_desktop.core.models.digests import sha256_file
from tests.integration.gui_windows import open_app
from tests.support.model_stores import demo, place
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_a_task_waiting_for_its_models_digest_check_says_so_then_runs(
    qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first hash on this machine: not the digest another test's service kept (digest_cache).
    monkeypatch.setenv("LMSP_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "models"
    folder.mkdir()
    release = threading.Event()

    def held(*args: Any, **kwargs: Any) -> str:
        release.wait(timeout=60)  # the file stays "hashing" until the test has looked
        return sha256_file(*args, **kwargs)

    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(), model_dirs=[folder], include_demo=False
    ) as (core, window):
        monkeypatch.setattr(hashing, "sha256_file", held)
        place(demo(), folder / "smol.gguf")
        rescan = asyncio.ensure_future(core.rescan_models())  # Models › Rescan
        try:
            await until(lambda: core.registry.gate.hash_queued("smol"), what="hashing")
            task_id = await core.submit("smol", "Hello?")
            tasks, details = window.tasks, window.tasks.details
            await until(lambda: tasks.model.row_of(task_id) is not None, what="its row")
            tasks.table.selectRow(tasks.model.row_of(task_id))
            await until(
                lambda: "digest check of smol" in details.output.placeholderText(),
                what=details.output.placeholderText,
            )
        finally:
            release.set()
            await rescan
        await until(lambda: details.state == "completed", limit=60, what="the task to run")
