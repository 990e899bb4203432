"""Clients in one click ("Beyond the fixes"): Connect a client makes a token in the app, shows
it once, and its snippets work as pasted (curl, the anthropic and ollama SDKs' Python, and
Claude Code's environment run for real against the real service)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models.memory import ModelSettings
from lmsp_desktop.core.scopes import DEFAULT_SCOPES, MODELS_READ
from lmsp_desktop.gui.dialogs.connect_dialog import ConnectDialog
from lmsp_desktop.gui.snippets import BRIEF
from tests.integration.gui_windows import MODEL, open_app
from tests.support.long_context_model import copy_long_context_demo_model
from tests.support.polling import until

pytestmark = pytest.mark.gui
WORDS = ["Steam", " rises", " slowly"]
LONG = "long-context"  # the demo model's file declaring a 131,072-token trained context


async def run(*command: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    out, err = await asyncio.wait_for(process.communicate(), 300)
    return process.returncode or 0, out.decode(), err.decode()


async def connect_dialog(qtbot: Any, window: Any, scopes: frozenset[str]) -> ConnectDialog:
    """File › Connect a client…, the scopes ticked, Create token: the dialog with its token."""
    window.connect_action.trigger()
    dialog = window.dialog
    assert isinstance(dialog, ConnectDialog)
    for scope, box in dialog.scope_boxes.items():
        box.setChecked(scope in scopes)
    qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
    await until(lambda: dialog.token_line.text().startswith("lmsp_"), what="a token")
    await until(lambda: dialog.model_known, what="the model the snippets name")
    return dialog


def live(snippet: str) -> list[str]:
    """A snippet's lines that run (not comments, not blank)."""
    return [line for line in snippet.splitlines() if line and not line.startswith("#")]


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command")
async def test_connect_a_client_makes_a_token_and_its_curl_works_as_pasted(
    qtbot: Any, tmp_path: Path
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (core, window):
        window.nav.setCurrentRow(2)
        qtbot.mouseClick(window.clients.connect_button, Qt.MouseButton.LeftButton)
        dialog = window.dialog
        assert isinstance(dialog, ConnectDialog)
        dialog.name.setText("notebook")
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.token_line.text().startswith("lmsp_"), what="a token")
        token = dialog.token_line.text()
        qtbot.mouseClick(dialog.copy_token, Qt.MouseButton.LeftButton)
        assert QGuiApplication.clipboard().text() == token
        assert dialog.copy_token.text() == "Copied ✓"
        await until(lambda: window.clients.model.rowCount() == 1, what="the client listed")

        dialog.tabs.setCurrentIndex(0)  # curl
        qtbot.mouseClick(dialog.copy_snippet, Qt.MouseButton.LeftButton)
        command = QGuiApplication.clipboard().text()
        assert token in command and f"{core.url}/v1/responses" in command
        shell = await asyncio.create_subprocess_exec(
            "sh", "-c", command, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await shell.communicate()
        answer = json.loads(out)
        assert answer.get("object") == "response" and answer["status"] == "completed", answer
        for title in ("Python (openai)", "JavaScript (openai)", "Codex CLI", "LangChain"):
            assert f"{core.url}/v1" in dialog.views[title].toPlainText()
        # Anthropic's and Ollama's clients take the root: with /v1 Claude Code says only
        # "There's an issue with the selected model", never why.
        claude = dialog.views["Claude Code"].toPlainText()
        assert f"export ANTHROPIC_BASE_URL={core.url}\n" in claude
        assert f"export ANTHROPIC_AUTH_TOKEN={token}\n" in claude
        assert f"--model {MODEL}" in claude
        assert f'    base_url="{core.url}",' in dialog.views["Anthropic (Python)"].toPlainText()
        assert f'    host="{core.url}",' in dialog.views["Ollama"].toPlainText()
        note = dialog.note.text()
        assert f"OpenAI-compatible clients: <b>{core.url}/v1</b>" in note
        assert f"Ollama clients, the root without /v1: <b>{core.url}</b>" in note


@pytest.mark.parametrize(
    ("scopes", "said"),
    [
        (frozenset(DEFAULT_SCOPES), ["Steam rises slowly", "Steam rises slowly"]),
        (frozenset({MODELS_READ}), [MODEL, f"{MODEL}:latest"]),  # Ollama's name for it
    ],
)
async def test_the_anthropic_and_ollama_snippets_run_as_pasted(
    qtbot: Any, tmp_path: Path, scopes: frozenset[str], said: list[str]
) -> None:
    async with open_app(qtbot, tmp_path, engine=FakeEngine(WORDS)) as (_, window):
        dialog = await connect_dialog(qtbot, window, scopes)
        for title, expected in zip(("Anthropic (Python)", "Ollama"), said, strict=True):
            code, out, err = await run(sys.executable, "-c", dialog.views[title].toPlainText())
            assert code == 0, f"{title}: {err}"
            assert out.strip() == expected, title


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command")
async def test_claude_codes_environment_reaches_the_messages_api(
    qtbot: Any, tmp_path: Path
) -> None:
    """What Claude Code does with the tab's environment: POST $ANTHROPIC_BASE_URL/v1/messages
    with the token as a Bearer token (a base URL ending in /v1 answers 404 here)."""
    async with open_app(qtbot, tmp_path, engine=FakeEngine(WORDS)) as (_, window):
        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        exports = dialog.views["Claude Code"].toPlainText().split("\nclaude ")[0]
        body = json.dumps(
            {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "say hi"}]}
        )
        script = (
            f"{exports}\ncurl -s -w '\\n%{{http_code}}' $ANTHROPIC_BASE_URL/v1/messages"
            ' -H "Authorization: Bearer $ANTHROPIC_AUTH_TOKEN"'
            f" -H 'content-type: application/json' -d '{body}'"
        )
        code, out, err = await run("sh", "-c", script)
        assert code == 0, err
        answer, status = out.rsplit("\n", 1)
        assert status == "200", answer
        assert json.loads(answer)["content"][0]["text"] == "Steam rises slowly"


def claude_home(tmp_path: Path, work: Path) -> Path:
    """A HOME for Claude Code (its settings, not the user's), past its first-run questions
    (theme, trusting the folder) as a user's is after the first start."""
    home = tmp_path / "home"
    home.mkdir()
    seen = {"hasCompletedOnboarding": True, "theme": "dark"}
    seen["projects"] = {str(work): {"hasTrustDialogAccepted": True}}
    (home / ".claude.json").write_text(json.dumps(seen))
    return home


@pytest.mark.skipif(shutil.which("claude") is None, reason="needs Claude Code (npm)")
async def test_claude_code_answers_through_the_tabs_lines(qtbot: Any, tmp_path: Path) -> None:
    """Claude Code itself, with the tab's lines and its session line run for one prompt (no
    tools and a short system prompt: it fits the demo model's 8,192 tokens)."""
    async with open_app(qtbot, tmp_path, engine=FakeEngine(WORDS, context_length=8192)) as (
        _,
        window,
    ):
        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        lines = dialog.views["Claude Code"].toPlainText().splitlines()
        # The session line with -p "say hi", as its comment says: one prompt, then exit.
        session = live("\n".join(lines))[-1]
        check = [session.replace("claude ", 'claude -p "say hi" ', 1)]
        script = "\n".join([line for line in lines if not line.startswith("claude ")] + check)
        home = claude_home(tmp_path, tmp_path)
        code, out, err = await run("sh", "-c", script, env={**os.environ, "HOME": str(home)})
        assert code == 0, out + err
        assert "Steam rises slowly" in out


async def test_the_claude_code_tab_gives_the_demo_model_a_line_it_can_answer(
    qtbot: Any, tmp_path: Path
) -> None:
    """Claude Code's tools take 12-20k tokens; the demo model was trained for 8,192, so no
    setting gives it room (`models set --context 32768` leaves it at 8,192): the live line is
    the one without tools and with a short system prompt (the demo model loops on Claude Code's
    own), and the tab says why, with no advice that cannot help."""
    async with open_app(qtbot, tmp_path, engine=FakeEngine(WORDS)) as (_, window):
        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        claude = dialog.views["Claude Code"].toPlainText()
        session = f'claude --model {MODEL} --system-prompt "$SYSTEM" --tools ""'
        assert live(claude)[-1] == session
        assert [line for line in live(claude) if line.startswith("claude")] == live(claude)[-1:]
        assert f'SYSTEM="{BRIEF}"\nexport CLAUDE_CODE_MAX_OUTPUT_TOKENS=256\n' in claude
        assert '# A session (for one prompt, add -p "say hi" after claude):\n' in claude
        assert f"# {MODEL} holds 8,192 tokens: Claude Code's tools need a model with a\n" in claude
        assert "models set" not in claude


async def test_the_claude_code_tab_for_a_model_trained_for_a_long_context(
    qtbot: Any, tmp_path: Path
) -> None:
    """A model trained for 131,072 tokens runs with 8,192 by default: the tab keeps Claude
    Code's tools and says how to give it room; once it runs with 32,768, only the command."""
    folder = tmp_path / "models"
    folder.mkdir()
    copy_long_context_demo_model(folder / f"{LONG}.gguf", 131_072)
    engine = FakeEngine(WORDS)
    async with open_app(
        qtbot, tmp_path / "data", engine=engine, model_dirs=[folder], include_demo=False
    ) as (core, window):
        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        claude = dialog.views["Claude Code"].toPlainText()
        assert live(claude)[-1] == f"claude --model {LONG}"
        assert f"# {LONG} runs with 8,192 tokens; it was trained for 131,072." in claude
        assert f"#   lmsp-desktop models set {LONG} --context 32768\n" in claude
        dialog.reject()

        await core.save_model_settings(LONG, ModelSettings(context_length=32768))
        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        claude = dialog.views["Claude Code"].toPlainText()
        assert live(claude)[-1] == f"claude --model {LONG}"
        assert f"# {LONG} runs with 32,768 tokens: enough.\n" in claude
        assert "models set" not in claude and "--tools" not in claude


async def test_the_snippets_name_the_loaded_model_else_the_first_listed(
    qtbot: Any, tmp_path: Path
) -> None:
    """With two models, every tab names the first listed while none is loaded, and the
    loaded one once it is (they named the demo model while another was loaded)."""
    folder = tmp_path / "models"
    folder.mkdir()
    copy_long_context_demo_model(folder / f"{LONG}.gguf", 131_072)
    async with open_app(
        qtbot, tmp_path / "data", engine=FakeEngine(WORDS), model_dirs=[folder]
    ) as (core, window):
        first, second = [m.id for m in await core.models()]
        assert {first, second} == {MODEL, LONG}

        def named(dialog: ConnectDialog) -> dict[str, str]:
            """Which of the two models each tab names."""
            return {
                title: " ".join(
                    m for m in (first, second) if re.search(rf"\b{re.escape(m)}\b", text)
                )
                for title, view in dialog.views.items()
                for text in [view.toPlainText()]
            }

        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        assert set(named(dialog).values()) == {first}, named(dialog)
        dialog.reject()

        await core.load_model_again(second)
        await until(lambda: core.model_loaded_state(second) == "loaded", what="loaded")
        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        assert set(named(dialog).values()) == {second}, named(dialog)


async def test_no_snippet_line_runs_past_the_box(qtbot: Any, tmp_path: Path) -> None:
    """At the dialog's default size, with a real token in them, every tab's lines fit its
    box: none scrolls sideways (the Anthropic and Ollama tabs' did)."""
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (_, window):
        dialog = await connect_dialog(qtbot, window, frozenset(DEFAULT_SCOPES))
        wide = {}
        for title, view in dialog.views.items():
            room = view.viewport().width() - 2 * view.document().documentMargin()
            metrics = view.fontMetrics()
            lines = view.toPlainText().splitlines()
            widest = max(lines, key=metrics.horizontalAdvance)
            if metrics.horizontalAdvance(widest) > room:
                wide[title] = widest
        assert view.viewport().width() > 500  # laid out at its default size
        assert not wide, wide


async def test_the_snippet_tabs_stay_put_when_the_token_appears(qtbot: Any, tmp_path: Path) -> None:
    """Create token, then a click on a tab: the tab must still be where the user aimed (the
    longer note after Create token wrapped to a second line and pushed the tabs down)."""
    async with open_app(qtbot, tmp_path, engine=FakeEngine()) as (_, window):
        window.nav.setCurrentRow(2)
        qtbot.mouseClick(window.clients.connect_button, Qt.MouseButton.LeftButton)
        dialog = window.dialog
        assert isinstance(dialog, ConnectDialog)
        await asyncio.sleep(0.1)
        tabs_before = dialog.tabs.geometry()
        qtbot.mouseClick(dialog.create_button, Qt.MouseButton.LeftButton)
        await until(lambda: dialog.token_line.text().startswith("lmsp_"), what="a token")
        await asyncio.sleep(0.1)
        assert dialog.tabs.geometry() == tabs_before
        assert dialog.base in dialog.note.text()
