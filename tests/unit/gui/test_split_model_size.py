"""A split model (`NAME-00001-of-00003.gguf` and its other parts) is as big as all its parts
in every view: the registry's ModelInfo (GET /v1/models, `models list`) and the Models page
(it counted only part 1: 1.0 MiB where the Download dialog and the task said 1.5 MiB). Its
run still checks part 1's own size, as recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.gui.format import human_size
from lmsp_desktop.gui.models.model_table import COL_SIZE
from lmsp_desktop.gui.pages.models_page import ModelsPage
from tests.support.split_model import copy_split_cut_model

pytestmark = pytest.mark.gui


async def test_a_split_models_size_is_all_its_parts(
    qtbot: Any, core: Any, store: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    parts = copy_split_cut_model(folder / "tiny.gguf")
    assert len(parts) == 3
    total = sum(p.stat().st_size for p in parts)
    first = parts[0].stat().st_size
    assert first < total
    registry = ModelRegistry(store.db, [folder], include_demo=False, chunk_size=64 * 1024)
    core.registry = registry
    await registry.scan()
    (info,) = await registry.list_models()
    assert info.path == parts[0] and info.state == "verified", info
    assert info.size_bytes == total  # every view reads it here
    assert info.as_api()["size_bytes"] == total
    assert (await registry.get(info.id)).size_bytes == total
    assert await registry.path_for_run(info.id) == parts[0]  # part 1 unchanged: it runs

    page = ModelsPage(core)
    qtbot.addWidget(page)
    await page.load()
    assert page.model.index(0, COL_SIZE).data() == human_size(total)
    assert human_size(total) != human_size(first)

    # Part 1 changed after its verify: refused as before (its own recorded size compared).
    with parts[0].open("ab") as f:
        f.write(b"\0")
    with pytest.raises(LmspError, match="changed"):
        await registry.path_for_run(info.id)
