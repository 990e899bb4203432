"""The Clients page lists a token made from the CLI while the app runs (the nineteenth walk:
`lmsp-desktop token create` in a shell beside the open window, and the page still said
"No clients yet" after switching pages). The token is made as the CLI makes it, through a
store of its own on the data directory (another connection, nothing told to the window);
the real MainWindow over a real core."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.gui.models.client_table import COL_NAME
from tests.integration.gui_windows import open_app
from tests.integration.serve_process import create_token
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_a_token_made_from_the_cli_shows_when_the_clients_page_is_shown(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path) as (_, window):
        clients = window.clients
        window.nav.setCurrentRow(2)  # the Clients page, read once: nobody yet
        await until(lambda: clients.empty.isVisible(), what="the empty Clients page")
        assert clients.model.rowCount() == 0
        window.nav.setCurrentRow(0)  # to the Tasks page while a shell makes a token
        await asyncio.to_thread(create_token, tmp_path, "responses:write", "shell-bot")

        def names() -> list[str]:
            rows = clients.model
            return [str(rows.index(r, COL_NAME).data()) for r in range(rows.rowCount())]

        window.nav.setCurrentRow(2)  # back: the page reads the clients again
        await until(lambda: names() == ["shell-bot"], what=names)
        await until(lambda: not clients.empty.isVisible(), what="the empty note gone")
        assert window.nav.item(2).text().split() == ["Clients", "1"]  # the sidebar's count
        window.resize(1200, 780)
        await until(lambda: clients.table.isVisible(), what="the table")
        window.grab().save("/tmp/walkF19/shots/hM19-clients-cli-token.png")
