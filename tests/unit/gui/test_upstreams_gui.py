"""Upstreams in the window: Settings lists, adds and removes them (the key never shown), and
the Models page shows an upstream's models with its state, latency and model count."""

from __future__ import annotations

import asyncio
import gc

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QLineEdit

from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.upstreams import add_upstream, list_upstreams
from lmsp_desktop.core.upstreams.catalog import UpstreamCatalog
from lmsp_desktop.gui.dialogs.settings_dialog import SettingsDialog
from lmsp_desktop.gui.models.model_table import COL_FOLDER, COL_LOADED, COL_NAME, COL_STATUS
from lmsp_desktop.gui.pages.models_page import ModelsPage
from tests.support.fake_upstream import FakeUpstream
from tests.support.polling import until

pytestmark = pytest.mark.gui

SECRET = "sk-window-secret-4242"


def texts(dialog: SettingsDialog) -> list[str]:
    table = dialog.upstreams.table
    cells = [table.item(r, c).text() for r in range(table.rowCount()) for c in range(6)]
    labels = [w.text() for w in dialog.findChildren(QLabel)]
    edits = [w.text() for w in dialog.findChildren(QLineEdit)]
    return cells + labels + edits


async def test_settings_adds_and_removes_an_upstream_without_showing_its_key(qtbot, core, store):
    dialog = SettingsDialog(core)  # closed and deleted below, on this thread
    dialog.show()
    assert dialog.upstreams.table.rowCount() == 0
    dialog.upstreams.add_button.click()
    add = dialog.upstreams.dialog
    assert add is not None and add.isVisible()
    add.name.setText("Bad Name")
    add.url.setText("http://gpu-box:8000")
    await add.save()
    assert "upstream name" in add.error.text() and add.isVisible()
    add.name.setText("gpu")
    add.key.setText(SECRET)
    assert add.key.echoMode() == QLineEdit.EchoMode.Password
    add.key.setFocus()
    await add.save()
    table = dialog.upstreams.table
    await until(lambda t=table: t.rowCount() == 1, what="the new row")
    [row] = await list_upstreams(store.db, with_keys=True)
    assert (row.name, row.base_url, row.api_key) == ("gpu", "http://gpu-box:8000/v1", SECRET)
    shown = texts(dialog)  # the add dialog is its child: its fields are in there too
    assert "gpu" in shown and "http://gpu-box:8000/v1" in shown and "set" in shown
    assert not [t for t in shown if SECRET in t]
    dialog.upstreams.table.selectRow(0)
    await dialog.upstreams.remove_selected()
    assert dialog.upstreams.table.rowCount() == 0
    assert await list_upstreams(store.db) == []
    dialog.hide()
    dialog.deleteLater()  # on this thread, not whenever Python collects it
    del dialog, add, table
    await asyncio.sleep(0.05)
    gc.collect()  # Qt objects in reference cycles die here, not in a worker thread later


async def test_models_page_shows_upstream_models_up_and_down(qtbot, core, store):
    fake = FakeUpstream([], models=("m1",))
    await fake.start()
    registry = ModelRegistry(store.db, [], include_demo=False)
    catalog = UpstreamCatalog(store.db)
    registry.upstreams = catalog
    core.registry = registry
    await add_upstream(store.db, "gpu", fake.url, None)
    await catalog.refresh()
    await catalog.probe_all()
    page = ModelsPage(core)  # deleted below, on this thread
    page.show()
    try:
        await page.load()
        model = page.model
        assert model.index(0, COL_NAME).data() == "gpu/m1"
        status = model.index(0, COL_STATUS).data()
        assert status.startswith("● gpu up ·") and status.endswith("· 1 model"), status
        assert " ms" in status
        assert model.index(0, COL_FOLDER).data() == fake.url
        # Runs on the upstream: no "0 B in memory" in the sidebar, words in the Loaded cell
        # rather than a bare blue dot (issue 24 item 6).
        core.loaded["gpu/m1"] = "loaded"
        await page.load()
        assert model.in_memory() == []
        assert model.index(0, COL_LOADED).data() == "on gpu"
        assert model.index(0, COL_LOADED).data(Qt.ItemDataRole.DecorationRole) is None
        await fake.stop()
        await catalog.probe_all()
        await page.load()
        assert model.index(0, COL_STATUS).data() == "✗ gpu down"
        assert model.index(0, COL_LOADED).data() == "✗ down"
        assert "does not answer" in model.index(0, COL_STATUS).data(3)  # ToolTipRole
    finally:
        await catalog.close()
        page.hide()
        page.deleteLater()
        del page
        await asyncio.sleep(0.05)
        gc.collect()
