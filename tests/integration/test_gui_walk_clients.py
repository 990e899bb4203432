"""Issue 24 items 2, 3, 8 and 23: the addresses and snippets the window hands out work as
pasted — the Python snippets run in a real interpreter and curl for real, against the real
core's HTTP service, for each scope choice; a service on every interface is never shown as
0.0.0.0."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.scopes import ADMIN, MODELS_READ, RESPONSES_READ, RESPONSES_WRITE
from lmsp_desktop.gui.addresses import lan_address
from lmsp_desktop.gui.dialogs.connect_dialog import ConnectDialog
from lmsp_desktop.gui.dialogs.pair_dialog import PairDialog
from tests.integration.gui_windows import MODEL, open_app
from tests.support.polling import until

pytestmark = pytest.mark.gui
WORDS = ["Steam", " rises", " slowly"]


async def run(*command: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    return process.returncode or 0, out.decode(), err.decode()


def tick(boxes: dict[str, Any], scopes: set[str]) -> None:
    for scope, box in boxes.items():
        box.blockSignals(True)  # one code for the final choice, not one per click
        box.setChecked(scope in scopes)
        box.blockSignals(False)


@pytest.mark.parametrize(
    ("scopes", "expected"),
    [
        ({MODELS_READ, RESPONSES_READ, RESPONSES_WRITE}, "Steam rises slowly"),
        ({RESPONSES_WRITE}, "Steam rises slowly"),
        ({MODELS_READ}, MODEL),
        ({RESPONSES_READ}, "This token may read its responses by id."),
        ({ADMIN}, "This token may manage clients and settings."),
    ],
)
async def test_pair_a_clients_python_snippet_runs_as_pasted_for_each_scope_choice(
    qtbot: Any, tmp_path: Path, scopes: set[str], expected: str
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine(WORDS)) as (_, window):
        window.open_pair()
        dialog = window.dialog
        assert isinstance(dialog, PairDialog)
        await until(lambda: "-" in dialog.code_label.text(), what="a first code")
        tick(dialog.scope_boxes, scopes)
        await dialog.new_code()
        snippet = dialog.snippet.toPlainText()
        assert "httpx" not in snippet  # the openai package no longer brings it
        code, out, err = await run(sys.executable, "-c", snippet)
        assert code == 0, err
        assert expected in out, out


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command")
async def test_connect_a_clients_snippets_do_what_a_read_only_token_may(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine(WORDS)) as (_, window):
        window.connect_action.trigger()  # File ▸ Connect a client…
        dialog = window.dialog
        assert isinstance(dialog, ConnectDialog)
        tick(dialog.scope_boxes, {MODELS_READ})
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.token_line.text().startswith("lmsp_"), what="a token")

        code, out, err = await run("sh", "-c", dialog.views["curl"].toPlainText())
        assert code == 0 and err == "", err  # -s: no progress meter
        assert [m["id"] for m in json.loads(out)["data"]] == [MODEL]
        code, out, err = await run(
            sys.executable, "-c", dialog.views["Python (openai)"].toPlainText()
        )
        assert code == 0, err
        assert out.split() == [MODEL]
        for title in ("Codex CLI", "LangChain", "Chat apps"):
            assert "needs responses:write" in dialog.views[title].toPlainText(), title


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command")
async def test_the_curl_examples_print_only_the_answer(qtbot: Any, tmp_path: Path) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine(WORDS)) as (_, window):
        window.connect_action.trigger()
        dialog = window.dialog
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.token_line.text().startswith("lmsp_"), what="a token")
        code, out, err = await run("sh", "-c", dialog.views["curl"].toPlainText())
        assert code == 0 and err == "", err  # -s: no progress meter around the answer
        assert json.loads(out)["output_text"] == "Steam rises slowly"
        # The empty Tasks page's example, with the token exported as it says.
        window.tasks.copy_curl()
        command = f"export LMSP_TOKEN={dialog.token}; {QGuiApplication.clipboard().text()}"
        code, out, err = await run("sh", "-c", command)
        assert code == 0 and err == "", err
        assert json.loads(out)["object"] == "response"


async def test_on_every_interface_the_window_shows_addresses_people_can_use(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine(WORDS), host="0.0.0.0") as (
        core,
        window,
    ):
        port = core.url.rsplit(":", 1)[1]
        here = f"http://127.0.0.1:{port}"
        assert "0.0.0.0" in core.url  # what the service reports: the test is about the window
        assert here in window.windowTitle()
        assert here in window.status.url_label.text()
        window.sidebar.copy_url()
        assert QGuiApplication.clipboard().text() == f"{here}/v1"
        assert here in window.tasks.empty_label.text()
        # The empty Tasks page says where a token comes from, and offers Connect a client….
        assert "Connect a client…" in window.tasks.empty_label.text()
        lan = lan_address()
        if lan is not None:
            assert f"http://{lan}:{port}/v1" in window.status.warning.toolTip()

        window.connect_action.trigger()
        dialog = window.dialog
        assert isinstance(dialog, ConnectDialog)
        assert dialog.base == f"{here}/v1"
        if lan is not None:
            assert f"http://{lan}:{port}/v1" in dialog.note.text()
        window.open_pair()
        pair = window.dialog
        assert isinstance(pair, PairDialog)
        await until(lambda: "-" in pair.code_label.text(), what="a code")
        shown = [
            window.windowTitle(),
            window.status.url_label.text(),
            window.status.warning.toolTip(),
            window.tasks.empty_label.text(),
            dialog.note.text(),
            pair.url_label.text(),
            pair.snippet.toPlainText(),
            *(view.toPlainText() for view in dialog.views.values()),
        ]
        assert not [text for text in shown if "0.0.0.0" in text]
