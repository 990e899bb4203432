"""An embedding in the window's task table (the eighteenth walk): it generates no output, so
its Output cell says the input tokens it read, not "0"; in the Output tab's words ("3 input
tokens": "3 input" read as three inputs when two were sent). A real core running the real
demo model under the real MainWindow; the embedding asked through the real HTTP API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lmsp_desktop.gui.models.task_table import COL_TOKENS
from tests.integration.gui_windows import MODEL, client_token, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_an_embeddings_output_cell_shows_its_input_tokens(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path) as (core, window):
        token = await client_token(core, "indexer")
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(core.url) as http:
            two = {"model": MODEL, "input": ["bread", "butter"]}  # 2 inputs, 3 tokens
            async with http.post("/v1/embeddings", json=two, headers=headers) as answer:
                made = await answer.json()
                assert answer.status == 200, made
            async with http.get("/v1/tasks?limit=1", headers=headers) as listed:
                task = (await listed.json())["data"][0]
        assert task["kind"] == "embedding", task
        read = made["usage"]["prompt_tokens"]
        assert read > 2 and task["input_tokens"] == read
        rows = window.tasks.model

        def cell() -> Any:
            row = rows.row_of(task["id"])
            return None if row is None else rows.index(row, COL_TOKENS).data()

        # As `lmsp-desktop tasks` says it ("0" before): once the row shows the ended task.
        await until(lambda: cell() == f"{read} input tokens", what=cell)
