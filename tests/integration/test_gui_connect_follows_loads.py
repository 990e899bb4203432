"""The Connect a client… dialog's snippets follow a model loaded or unloaded while it is
open (they name the loaded model, else the first listed; they kept naming the one of when
the dialog opened), and the tab the user is on and its scroll position stay put. Real core
(store, registry with two models, runner), real MainWindow and its bridge."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.scopes import DEFAULT_SCOPES
from lmsp_desktop.gui.dialogs.connect_dialog import ConnectDialog
from tests.integration.gui_windows import MODEL, open_app
from tests.integration.test_gui_connect import LONG, WORDS, connect_dialog
from tests.support.long_context_model import copy_long_context_demo_model
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_the_snippets_follow_a_load_and_an_unload_and_keep_the_tab_and_scroll(
    qtbot: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    copy_long_context_demo_model(folder / f"{LONG}.gguf", 131_072)
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(WORDS), model_dirs=[folder]
    ) as (core, window):
        first, second = [m.id for m in await core.models()]
        assert {first, second} == {MODEL, LONG}

        def named(dialog: ConnectDialog) -> set[str]:
            """The models the tabs name, all tabs together."""
            return {
                m
                for view in dialog.views.values()
                for m in (first, second)
                if re.search(rf"\b{re.escape(m)}\b", view.toPlainText())
            }

        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        assert named(dialog) == {first}
        # The user is on the longest tab, scrolled down in it.
        title = max(dialog.views, key=lambda t: dialog.views[t].document().lineCount())
        view = dialog.views[title]
        dialog.tabs.setCurrentWidget(view)
        dialog.resize(dialog.width(), 420)  # short enough that the snippet scrolls
        bar = view.verticalScrollBar()
        await until(lambda: bar.maximum() > 2, what=lambda: f"{title}: {bar.maximum()}")
        bar.setValue(bar.maximum() - 1)
        at = bar.value()

        await core.load_model_again(second)  # loaded while the dialog is open
        await until(lambda: named(dialog) == {second}, what=lambda: named(dialog))
        assert dialog.tabs.currentWidget() is view
        assert bar.value() == at

        await core.unload_model(second)  # none loaded: the first listed again
        await until(lambda: named(dialog) == {first}, what=lambda: named(dialog))
        assert dialog.tabs.currentWidget() is view
        assert bar.value() == at
