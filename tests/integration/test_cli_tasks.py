"""`lmsp-desktop tasks` and `tasks cancel` as processes beside a real service (real Core,
real demo model, one request at a time): a running and a queued task are listed with their
model, state, queue position and tokens, and cancelled by id; a wrong id is named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.serve_process import call, lmsp
from tests.integration.service_fixtures import (
    MODEL,
    USER_SCOPES,
    LiveCore,
    cli_beside,
    task_object_of,
)
from tests.support.polling import until_sync

LONG = {"model": MODEL, "input": "Write a long story about bread.", "max_output_tokens": 400}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("cli-tasks"))
    try:
        yield running
    finally:
        running.stop()


def background(live: LiveCore, token: str) -> str:
    status, created = call(f"{live.url}/v1/responses", token, "POST", {**LONG, "background": True})
    assert status == 202, created
    return str(created["id"])


def test_tasks_lists_running_and_queued_and_cancels_them(live: LiveCore) -> None:
    token = live.token(*USER_SCOPES)  # another client's tasks: the command sees them all
    running = background(live, token)
    until_sync(lambda: task_object_of(live, token, running)["output_tokens"] >= 1, 180, "a token")
    queued = background(live, token)

    shown = cli_beside(live, "tasks")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line.split() for line in shown.stdout.splitlines()}
    assert lines["ID"] == ["ID", "MODEL", "KIND", "STATE", "QUEUE", "TOKENS", "AGE"]
    assert lines[running][1:4] == [MODEL, "response", "running"]
    assert lines[running][4] == "-" and int(lines[running][5]) >= 1
    assert lines[queued][1:5] == [MODEL, "response", "queued", "1"]
    assert lines[queued][5] == "0" and lines[queued][-1] in ("s", "min")

    listed = json.loads(cli_beside(live, "tasks", "--json").stdout)
    assert [t["id"] for t in listed[:2]] == [queued, running]  # unfinished first, newest first

    # Unfinished tasks are all shown, however small the limit (as `ollama ps` shows them).
    unfinished = cli_beside(live, "tasks", "--limit", "1").stdout
    assert queued in unfinished and running in unfinished

    done = cli_beside(live, "tasks", "cancel", queued, running)
    assert done.returncode == 0, done.stderr
    assert f"{queued}: cancelled" in done.stdout and running in done.stdout
    until_sync(
        lambda: task_object_of(live, token, running)["state"] == "cancelled", 60, "the cancel"
    )
    assert task_object_of(live, token, queued)["state"] == "cancelled"
    shown = cli_beside(live, "tasks", "--limit", "1")
    lines = {line.split()[0]: line.split() for line in shown.stdout.splitlines()}
    assert lines[queued][3] == "cancelled" and running not in lines  # finished: the newest 1

    wrong = cli_beside(live, "tasks", "cancel", "resp_000000000000000000000000", queued)
    assert wrong.returncode == 2
    assert "resp_000000000000000000000000" in wrong.stderr
    assert f"{queued}: cancelled" in wrong.stdout  # each id on its own; a cancel repeated is one


def test_tasks_needs_a_running_service(tmp_path: Path) -> None:
    done = lmsp("tasks", data_dir=tmp_path)
    assert done.returncode == 2 and "No service runs" in done.stderr
