"""The README's Claude Code lines, run with Claude Code itself against the real service and
the real demo model: it prints an answer within seconds. On Claude Code's own system prompt
the demo model can loop (walkG19: nothing printed for 5 minutes, Claude Code asking
max_tokens 32000); the README gives it a short system prompt and an output cap."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.service_fixtures import USER_SCOPES, LiveCore
from tests.integration.test_readme_tools import DOCUMENTED, README, snippets

pytest_plugins = ["tests.integration.service_fixtures"]

HEADING = "Anthropic Messages (the `anthropic` SDK; Claude Code): `pip install anthropic`"
CAP = 256
# A guard against a hang, not a measure: the README's line answered in 1-33 s on 2 cores;
# without the system prompt and the cap it was still silent after 300 s.
GUARD = 180


def block() -> str:
    return snippets("sh", README, "Connect a first client")[HEADING]


def test_the_readme_gives_claude_code_a_short_system_prompt_and_a_cap() -> None:
    assert '--system-prompt "You are a helpful assistant. Answer briefly."' in block()
    assert f"CLAUDE_CODE_MAX_OUTPUT_TOKENS={CAP} claude " in block()
    assert '--tools ""' in block()


@pytest.mark.skipif(shutil.which("claude") is None, reason="needs Claude Code (npm)")
def test_readme_claude_code_lines_answer(live: LiveCore, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()  # Claude Code's settings, past its first-run questions, not the user's
    (home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
    client = live.client(*USER_SCOPES)
    env = {**os.environ, "HOME": str(home), "LMSP_TOKEN": client.token}
    env.update(DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    done = subprocess.run(
        ["bash", "-c", block().replace(DOCUMENTED, live.url)],
        capture_output=True,
        text=True,
        timeout=GUARD,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.stdout.strip(), f"Claude Code printed no answer: {said}"
    # Its answer, or, where the model looped all the same, the cap's own sentence (seconds
    # later, not minutes): either way the user reads something, and Claude Code ends.
    assert done.returncode == 0 or f"exceeded the {CAP} output token maximum" in said, said
    asked = live.call(
        live.core.store.db.fetchall(
            "SELECT json_extract(r.request, '$.max_output_tokens') AS cap FROM tasks t"
            " JOIN responses r ON r.id = t.id WHERE t.client_id = ?",
            (client.id,),
        )
    )
    assert asked, "Claude Code sent no request"
    assert {row["cap"] for row in asked} <= set(range(1, CAP + 1)), [row["cap"] for row in asked]
