"""The details header at 900 px (the twenty-first walk): an incomplete task's header read
"resp_01a…9f168b55 · smoll…truct · incomplete — stopped at the 400-token limit", the model's
name cut while the reason after the state stood whole. The model's name is what a user
needs: the id gives way first, then the reason's words, the model's name last; the state
word always stays, and everything is whole in the tooltip. The real window over a real core;
a scripted engine stops the task at its token limit."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from tests.integration.gui_windows import MODEL, client_token, open_app, post_background
from tests.support.polling import until

pytestmark = pytest.mark.gui
REASON = "stopped at the 400-token limit"


def first_line(html: str) -> list[str]:
    plain = re.sub(r"<[^>]+>", "", html.split("<br>")[0]).replace("\u00a0", " ")
    return plain.split(" · ")


async def test_the_reason_after_the_state_gives_way_before_the_models_name(
    qtbot: Any, tmp_path: Path
) -> None:
    engine = FakeEngine([f" w{i}" for i in range(600)], token_delay=0.0)
    async with open_app(qtbot, tmp_path / "data", engine=engine) as (core, window):
        tasks = window.tasks
        task_id = await post_background(core, await client_token(core), max_output_tokens=400)
        await until(lambda: tasks.model.row_of(task_id) is not None)
        tasks.show_task(task_id)
        header = tasks.details.header
        await until(lambda: REASON in header.toolTip(), what=header.toolTip)

        window.resize(1600, 900)  # room for all of it
        await until(
            lambda: first_line(header.text())[1:3] == [MODEL, f"● incomplete — {REASON}"],
            what=lambda: first_line(header.text()),
        )
        for width in (1100, 1000, 900):
            window.resize(width, 600)
            await until(lambda w=width: window.width() == w, what=window.width)
            await until(lambda: f"incomplete — {REASON}" in header.toolTip(), what=header.toolTip)
            shown_id, model, state, *_ = first_line(header.text())
            assert model == MODEL, (width, first_line(header.text()))  # whole
            assert state.startswith("● incomplete"), state  # the state word whole
            # The reason is cut (or left out) only once the id is as short as it gets.
            if state != f"● incomplete — {REASON}":
                assert "…" in shown_id, (width, shown_id)
                assert state == "● incomplete" or state.endswith("…"), state
                if state.endswith("…"):  # cut at a word: never "stopped at the 4…"
                    kept = state.removeprefix("● incomplete — ").removesuffix("…").split()
                    assert kept == REASON.split()[: len(kept)], state
            assert task_id in header.toolTip()
        # At 900 px (the walk's width) the reason had to give way: it did, not the model.
        assert state != f"● incomplete — {REASON}", state
