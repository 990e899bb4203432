"""The Clients page, while shown, follows tokens made and revoked from a shell
(`lmsp-desktop token create …` / `token revoke …` beside the open window: another process,
another connection, nothing told to the window), without losing the selection or the scroll.
It saw them only when shown again. Real MainWindow over a real core; the tokens are made as
the CLI makes them, through a store of their own on the data directory."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from PySide6.QtCore import QItemSelectionModel

from lmsp_desktop.core.storage.clients import create_client, revoke_client
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.gui.models.client_table import CLIENT_ID, COL_NAME
from tests.integration.gui_windows import open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui
T = TypeVar("T")
SCOPES = frozenset({"responses:write"})


def from_a_shell(data_dir: Path, work: Callable[[Store], Awaitable[T]]) -> T:
    """`work` on a store of its own on the data directory, in a thread: as a CLI command."""

    async def run() -> T:
        store = Store(data_dir)
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, run()).result()


def make_tokens(data_dir: Path, *names: str) -> list[str]:
    async def work(store: Store) -> list[str]:
        return [(await create_client(store.db, n, SCOPES))[0]["id"] for n in names]

    return from_a_shell(data_dir, work)


def revoke(data_dir: Path, client_id: str) -> None:
    async def work(store: Store) -> None:
        await revoke_client(store.db, client_id)

    from_a_shell(data_dir, work)


async def test_tokens_made_and_revoked_in_a_shell_show_while_the_page_is_shown(
    qtbot: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    async with open_app(qtbot, data) as (_, window):
        page, table = window.clients, window.clients.table
        window.resize(1200, 600)
        window.nav.setCurrentRow(2)
        await until(lambda: page.empty.isVisible(), what="the empty Clients page")
        await asyncio.to_thread(make_tokens, data, *(f"bot-{i:02d}" for i in range(40)))

        def names() -> list[str]:
            rows = page.model
            return [str(rows.index(r, COL_NAME).data()) for r in range(rows.rowCount())]

        # Shown all along: read again within two seconds, no page switch.
        await until(lambda: len(names()) == 40, what=names)
        assert not page.empty.isVisible()
        assert window.nav.item(2).text().split() == ["Clients", "40"]

        # The user scrolls down and picks a client; a shell makes one more token.
        bar = table.verticalScrollBar()
        bar.setValue(bar.maximum())
        row = page.model.rowCount() - 3
        table.selectionModel().select(
            page.model.index(row, 0),
            QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows,
        )
        chosen = page.selected()
        assert chosen is not None and chosen["name"] == "bot-02"
        scrolled = bar.value()
        assert scrolled > 0
        [newest] = await asyncio.to_thread(make_tokens, data, "shell-bot")
        await until(lambda: names()[:1] == ["shell-bot"], what=names)
        assert window.nav.item(2).text().split() == ["Clients", "41"]
        selected = page.selected()
        assert selected is not None and selected["name"] == "bot-02"  # the same client
        assert bar.value() >= scrolled - table.rowHeight(0)  # not back at the top
        assert page.revoke_button.isEnabled()

        # Revoked from a shell: gone from the page; the selection stays on its client.
        await asyncio.to_thread(revoke, data, newest)
        await until(lambda: "shell-bot" not in names(), what=names)
        assert window.nav.item(2).text().split() == ["Clients", "40"]
        selected = page.selected()
        assert selected is not None and selected["name"] == "bot-02"
        assert table.selectionModel().selectedRows()[0].data(CLIENT_ID) == chosen["id"]
