"""A finished embedding's Output tab says what it made (the nineteenth walk found "No output
yet." under a completed one): how many vectors of how many dimensions, from how many input
tokens. The real demo model under the real MainWindow; the embedding asked through the real
HTTP API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.gui_windows import MODEL, client_token, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_a_finished_embeddings_output_tab_says_what_it_made(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path) as (core, window):
        token = await client_token(core, "indexer")
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            aiohttp.ClientSession(core.url) as http,
            http.post(
                "/v1/embeddings",
                json={"model": MODEL, "input": ["bread", "butter and jam"]},
                headers=headers,
            ) as answer,
        ):
            made = await answer.json()
            assert answer.status == 200, made
        dims = len(made["data"][0]["embedding"])
        read = made["usage"]["prompt_tokens"]
        tasks = window.tasks
        await until(lambda: tasks.model.rowCount() == 1, what="the embedding's row")
        tasks.table.selectRow(0)
        output = tasks.details.output
        said = f"2 embeddings of {dims:,} dimensions, {read:,} input tokens."
        await until(lambda: output.placeholderText().startswith(said), what=output.placeholderText)
        assert "No output" not in output.placeholderText()
        assert output.toPlainText() == ""  # no cursor, no text: vectors went to the client
        tasks.details.grab().save(str(tmp_path / "embedding-output.png"))
