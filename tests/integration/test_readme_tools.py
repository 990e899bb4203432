"""The snippets of the README's "Connect a first client" and of docs/clients.md's "Use it
from your tools" work as pasted: each Python snippet (and the curl ones) runs against the
real service with only its address swapped for the test's and the token in LMSP_TOKEN, as
the pages say to set it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.service_fixtures import USER_SCOPES, LiveCore

pytest_plugins = ["tests.integration.service_fixtures"]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CLIENTS = ROOT / "docs" / "clients.md"
DOCUMENTED = "http://127.0.0.1:5677"
# Snippets for packages outside the dev extras (checked by hand when the README changes).
NOT_INSTALLED = {"LangChain": "langchain_openai"}


def snippets(
    language: str, page: Path = CLIENTS, heading: str = "Use it from your tools"
) -> dict[str, str]:
    """The `language` code blocks of a page's section, keyed by the ### heading above each."""
    text = page.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, str] = {}
    for part in re.split(r"^### ", section, flags=re.M)[1:]:
        heading = part.split("\n", 1)[0].strip()
        blocks = re.findall(rf"```{language}\n(.*?)```", part, re.S)
        if blocks:
            found[heading] = blocks[0]
    return found


def run(code: list[str], live: LiveCore, token: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LMSP_TOKEN": token}
    return subprocess.run(code, capture_output=True, text=True, timeout=300, env=env, check=False)


PYTHON = snippets("python")
FIRST = snippets("python", README, "Connect a first client")


def test_the_section_has_a_snippet_for_each_tool() -> None:
    assert set(PYTHON) == {
        "The `openai` SDK: Chat Completions",
        "The `openai` SDK: Responses, with conversation state",
        "openai-agents",
        "LangChain",
    }
    assert set(snippets("js")) == {"Vercel AI SDK"}
    assert set(snippets("toml")) == {"Codex CLI"}
    assert 'wire_api = "responses"' in snippets("toml")["Codex CLI"]
    assert '"Authorization: Bearer $LMSP_TOKEN"' in snippets("sh")["curl"]  # double quotes


@pytest.mark.parametrize("heading", [h for h in PYTHON if h not in NOT_INSTALLED])
def test_python_snippet_runs_as_pasted(heading: str, live: LiveCore) -> None:
    code = PYTHON[heading]
    assert DOCUMENTED + "/v1" in code
    done = run(
        [sys.executable, "-c", code.replace(DOCUMENTED, live.url)], live, live.token(*USER_SCOPES)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the snippet printed nothing"


def test_curl_snippet_runs_as_pasted(live: LiveCore) -> None:
    curl = shutil.which("curl")
    assert curl is not None, "curl is needed to check the README's curl snippet"
    script = snippets("sh")["curl"].replace(DOCUMENTED, live.url)
    done = run(["bash", "-c", script], live, live.token(*USER_SCOPES))
    assert done.returncode == 0, done.stderr
    assert '"object":"chat.completion"' in done.stdout.replace(" ", ""), done.stdout


def test_the_readme_shows_one_first_snippet_per_api_family() -> None:
    assert [heading.split(" (")[0].split(":")[0] for heading in FIRST] == [
        "OpenAI",
        "Anthropic Messages",
        "Ollama's API",
    ]
    assert "curl" in snippets("sh", README, "Connect a first client")


@pytest.mark.parametrize("heading", list(FIRST))
def test_readme_first_client_snippet_runs_as_pasted(heading: str, live: LiveCore) -> None:
    code = FIRST[heading]
    assert DOCUMENTED in code
    done = run(
        [sys.executable, "-c", code.replace(DOCUMENTED, live.url)], live, live.token(*USER_SCOPES)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the snippet printed nothing"


def test_readme_curl_snippet_runs_as_pasted(live: LiveCore) -> None:
    script = snippets("sh", README, "Connect a first client")["curl"].replace(DOCUMENTED, live.url)
    done = run(["bash", "-c", script], live, live.token(*USER_SCOPES))
    assert done.returncode == 0, done.stderr
    assert '"object":"chat.completion"' in done.stdout.replace(" ", ""), done.stdout
