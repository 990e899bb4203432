"""The details header at 1000×700 (the reviewer's walk): with a long model name, the task id
gives way first, cut in its middle (its prefix and its end kept, whole in the tooltip and in
Copy id), and the model's name stays whole; it was cut to "s…t" while the whole id held the
line. The real window over a real core; the model a real GGUF file under a long name."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QGuiApplication

from lmsp_desktop.core.models.demo import demo_model_path
from tests.integration.gui_windows import open_app, slow_engine
from tests.support.polling import until

pytestmark = pytest.mark.gui
LONG_NAME = "bartowski-smollm2-135m-instruct-8k-gguf-q4_1"


def plain(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html).replace("\u00a0", " ")


async def test_the_id_gives_way_in_its_middle_before_the_models_name(
    qtbot: Any, tmp_path: Path
) -> None:
    demo = demo_model_path()
    assert demo is not None
    folder = tmp_path / "models"
    folder.mkdir()
    os.link(demo, folder / f"{LONG_NAME}.gguf")
    async with open_app(
        qtbot, tmp_path / "data", engine=slow_engine(), model_dirs=[folder], include_demo=False
    ) as (core, window):
        window.resize(1000, 700)
        tasks = window.tasks
        task_id = await core.submit(LONG_NAME, "Tell me a story.")
        await until(lambda: tasks.model.row_of(task_id) is not None)
        tasks.show_task(task_id)
        header = tasks.details.header
        await until(lambda: "running" in header.text(), what=header.text)
        first_line = plain(header.text().split("<br>")[0])
        shown_id, model, *_ = first_line.split(" · ")
        assert model == LONG_NAME, first_line  # whole
        assert "…" in shown_id and shown_id != task_id, shown_id
        assert shown_id.startswith("resp_") and task_id.endswith(shown_id.split("…")[1])
        assert len(shown_id.split("…")[1]) >= 6  # its end, which tells it apart
        assert task_id in header.toolTip()
        tasks.details.copy_button.click()
        assert QGuiApplication.clipboard().text() == task_id
        await core.cancel(task_id)
