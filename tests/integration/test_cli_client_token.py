"""The CLI beside a real service (real Core, real demo model) with `LMSP_TOKEN` set to a
client's token, as a user who exported the token a pairing gave: a missing scope names the fix
in this shell for every command (`models load|unload` as `models rescan|verify|pull` do), and
`tasks` says it lists that client's tasks only. Also: an embedding's row shows the input
tokens it read, and `serve --version` answers as `--version` does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.serve_process import call, lmsp
from tests.integration.service_fixtures import MODEL, USER_SCOPES, LiveCore, cli_beside


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("cli-client-token"))
    try:
        yield running
    finally:
        running.stop()


def embed(live: LiveCore, token: str, text: str) -> str:
    """The id of the embedding task made for `text` (POST /v1/embeddings answers vectors)."""
    status, made = call(f"{live.url}/v1/embeddings", token, "POST", {"model": MODEL, "input": text})
    assert status == 200, made
    status, tasks = call(f"{live.url}/v1/tasks?limit=1", token)
    assert status == 200 and tasks["data"][0]["kind"] == "embedding", tasks
    return str(tasks["data"][0]["id"])


@pytest.mark.parametrize("verb", ["load", "unload"])
def test_models_load_and_unload_name_lmsp_token_as_the_fix(
    live: LiveCore, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    monkeypatch.setenv("LMSP_TOKEN", live.token(*USER_SCOPES, name="laptop"))
    refused = lmsp("models", verb, MODEL, data_dir=live.data_dir)
    assert refused.returncode == 2, refused.stderr
    assert "This client (laptop) lacks the scope `admin`" in refused.stderr
    assert "LMSP_TOKEN is that client's token. Unset LMSP_TOKEN" in refused.stderr
    assert "lmsp-desktop token create --name NAME --scopes admin" in refused.stderr
    # Not the advice for a paired app: a headless server has no Clients page, and pairing
    # again is not how a shell gets an admin token.
    assert "Clients page" not in refused.stderr and "Pair again" not in refused.stderr


def test_tasks_with_a_client_token_says_whose_tasks_it_lists(
    live: LiveCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = embed(live, live.token(*USER_SCOPES, name="desktop-2"), "Another client's text.")
    token = live.token(*USER_SCOPES, name="laptop-7")
    mine = embed(live, token, "My own text.")

    monkeypatch.setenv("LMSP_TOKEN", token)
    shown = lmsp("tasks", data_dir=live.data_dir)
    assert shown.returncode == 0, shown.stderr
    assert mine in shown.stdout and theirs not in shown.stdout
    note = " ".join(shown.stderr.split())
    assert "Only the tasks of the client laptop-7 are listed: LMSP_TOKEN is its token." in note
    assert "Unset LMSP_TOKEN to list every client's" in note

    as_json = lmsp("tasks", "--json", data_dir=live.data_dir)
    assert [t["id"] for t in json.loads(as_json.stdout)] == [mine]  # JSON only, no note
    assert as_json.stderr == ""

    everyone = cli_beside(live, "tasks")  # LMSP_TOKEN unset: the command's own admin token
    assert mine in everyone.stdout and theirs in everyone.stdout
    assert everyone.stderr == ""

    monkeypatch.setenv("LMSP_TOKEN", live.token("admin", name="admin-shell"))
    as_admin = lmsp("tasks", data_dir=live.data_dir)
    assert theirs in as_admin.stdout and as_admin.stderr == ""  # an admin token sees all


def test_tasks_with_a_token_lacking_read_names_lmsp_token_as_the_fix(
    live: LiveCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LMSP_TOKEN", live.token("models:read", name="reader"))
    refused = lmsp("tasks", data_dir=live.data_dir)
    assert refused.returncode == 2
    assert "This client (reader) lacks the scope `responses:read`" in refused.stderr
    assert "Unset LMSP_TOKEN" in refused.stderr and "Pair again" not in refused.stderr


def test_an_embedding_shows_the_input_tokens_it_read(live: LiveCore) -> None:
    token = live.token(*USER_SCOPES)
    task_id = embed(live, token, "The quick brown fox jumps over the lazy dog.")
    status, task = call(f"{live.url}/v1/tasks/{task_id}", token)
    assert status == 200 and task["output_tokens"] == 0 and task["input_tokens"] > 0, task

    shown = cli_beside(live, "tasks")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line.split() for line in shown.stdout.splitlines()}
    assert lines[task_id][1:4] == [MODEL, "embedding", "completed"]
    assert lines[task_id][5:7] == [f"{task['input_tokens']:,}", "input"]


def test_serve_version_answers_as_the_app_version_does(tmp_path: Path) -> None:
    data_dir = tmp_path / "never-made"
    served = lmsp("serve", "--version", data_dir=data_dir)
    assert served.returncode == 0, served.stderr
    assert served.stdout.startswith("lmsp-desktop ") and "SQLite" in served.stdout
    assert served.stdout == lmsp("--version", data_dir=data_dir).stdout
    assert not data_dir.exists()  # it only answered: no service started, nothing written
