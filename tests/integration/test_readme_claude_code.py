"""The README's Claude Code lines, run with Claude Code itself against the real service and
the real demo model: it prints an answer and exits. (Without the short system prompt the
README gives it, the demo model loops on Claude Code's own and the command printed nothing
for minutes, until the context was full.)"""

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
# A guard against a hang, not a measure: the README's line answered in 6-17 s on 2 cores; the
# line without --system-prompt was still silent after 300 s.
GUARD = 180


def test_the_readme_gives_claude_code_a_short_system_prompt() -> None:
    block = snippets("sh", README, "Connect a first client")[HEADING]
    assert '--system-prompt "You are a helpful assistant. Answer briefly."' in block
    assert '--tools ""' in block


@pytest.mark.skipif(shutil.which("claude") is None, reason="needs Claude Code (npm)")
def test_readme_claude_code_lines_answer(live: LiveCore, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()  # Claude Code's settings, past its first-run questions, not the user's
    seen = {"hasCompletedOnboarding": True, "projects": {str(tmp_path): {}}}
    (home / ".claude.json").write_text(json.dumps(seen))
    script = snippets("sh", README, "Connect a first client")[HEADING].replace(DOCUMENTED, live.url)
    env = {**os.environ, "HOME": str(home), "LMSP_TOKEN": live.token(*USER_SCOPES)}
    env.update(DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=GUARD,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip(), "Claude Code printed no answer"
