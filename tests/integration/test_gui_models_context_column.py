"""The Context column says what a model runs with and what it was trained for, as `models
list` does (CONTEXT, TRAINED): after `models set smollm2-135m-instruct --context 4096` it
said 8,192 (the trained length) while `models list` said 4096. Real core, real MainWindow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from lmsp_desktop.cli_model_settings import _fitter
from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.memory import ModelSettings
from lmsp_desktop.gui.models.model_table import COL_CONTEXT
from tests.integration.gui_windows import MODEL, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui


async def test_the_context_column_says_the_context_the_model_runs_with(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine(["hi"])) as (core, window):
        window.nav.setCurrentRow(1)
        page = window.models

        def context() -> tuple[str, str]:
            index = page.model.index(page.model.row_of(MODEL) or 0, COL_CONTEXT)
            return str(index.data()), str(index.data(Qt.ItemDataRole.ToolTipRole))

        await until(lambda: context()[0] == "8,192", what=context)
        await core.save_model_settings(MODEL, ModelSettings(context_length=4096))  # models set
        # Read again at the page's clock (every 5 s while it is shown), as after a shell's
        # `models set`.
        await until(lambda: context()[0] == "4,096 of 8,192", 30, what=context)
        assert context()[1].startswith("Runs with 4,096 tokens per request (trained 8,192)")
        # What `models list` prints as CONTEXT and TRAINED for it.
        info = next(m for m in await core.models() if m.id == MODEL)
        listed = await _fitter(core.store, core.settings).current(info)
        assert listed is not None and listed.context_length == 4096
        assert info.context_length == 8192
