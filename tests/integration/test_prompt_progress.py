"""A running task shows how far its prompt has been read: the real demo model in a real engine
worker reads a ~3.4k-token prompt for seconds before its first token, and meanwhile
GET /v1/tasks/{id}, the task list and `lmsp-desktop tasks` say how far it is (instead of
"running, 0 tokens"), with the prompt's length as input_tokens; a task waiting behind
another's read says it waits (not "reading 0/N") until its own read begins; a cancel mid-read
still stops it, and the task keeps its prompt's length, as one failed by a restart does.
A fresh service of its own, so the prompts meet an empty prefix cache."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from lmsp_desktop.core.states import TERMINAL
from tests.integration.serve_process import call
from tests.integration.service_fixtures import (
    MODEL,
    USER_SCOPES,
    LiveCore,
    cli_beside,
    task_object_of,
)
from tests.support.polling import until_sync

# About 3,400 tokens of the demo model's vocabulary: several prompt chunks (n_batch 512).
LONG_PROMPT = "".join(
    f"Note {i}: the lighthouse keeper counted {i * 7} gulls and {i % 13} boats at dawn. "
    for i in range(150)
)
READ_LIMIT_S = 600.0  # a bound on a hang on a loaded 2-core machine, not a timing assertion


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("prompt-progress"))
    # Two requests of the model run at once (LiveCore makes it one): the second one's prompt
    # waits for the first one's read.
    running.core.apply_settings(dataclasses.replace(running.core.settings, parallel_per_model=2))
    try:
        yield running
    finally:
        running.stop()


def submit(live: LiveCore, token: str, text: str, max_output_tokens: int = 3, **fields: Any) -> str:
    body = {
        "model": MODEL,
        "input": text,
        "background": True,
        "max_output_tokens": max_output_tokens,
        "temperature": 0,
        **fields,
    }
    status, created = call(f"{live.url}/v1/responses", token, "POST", body)
    assert status == 202, created
    return str(created["id"])


def end_of(live: LiveCore, token: str, task_id: str) -> dict[str, Any]:
    return until_sync(
        lambda: (t := task_object_of(live, token, task_id))["state"] in TERMINAL and t,
        120,
        "its end",
    )


def listed(live: LiveCore, token: str, task_id: str) -> dict[str, Any]:
    status, body = call(f"{live.url}/v1/tasks?state=running", token)
    assert status == 200, body
    return next((t for t in body["data"] if t["id"] == task_id), {})


def test_the_task_object_shows_the_prompt_read_growing(live: LiveCore) -> None:
    token = live.token(*USER_SCOPES)
    task_id = submit(live, token, LONG_PROMPT + "Which note had the most boats?")

    seen: list[dict[str, Any]] = []
    in_list: list[dict[str, Any]] = []
    deadline = time.monotonic() + READ_LIMIT_S
    while True:
        now = task_object_of(live, token, task_id)
        seen.append(now)
        if now.get("prompt_progress") and len(in_list) < 3:
            entry = listed(live, token, task_id)
            if entry.get("prompt_progress"):
                in_list.append(entry)
        if now["state"] in TERMINAL:
            break
        assert time.monotonic() < deadline, f"still {now['state']} after {READ_LIMIT_S} s"
        time.sleep(0.02)

    assert seen[-1]["state"] == "incomplete", seen[-1]  # its 3 tokens, after the whole read
    status, response = call(f"{live.url}/v1/responses/{task_id}", token)
    assert status == 200, response
    prompt_tokens = response["usage"]["input_tokens"]
    assert prompt_tokens > 2000, response["usage"]

    reading = [s for s in seen if "prompt_progress" in s]
    assert reading, "the task object never showed its prompt being read"
    progress = [s["prompt_progress"] for s in reading]
    # The length is right from the first report; the read grows chunk by chunk.
    assert {p["total"] for p in progress} == {prompt_tokens}
    assert all(s["input_tokens"] == prompt_tokens for s in reading)
    processed = [p["processed"] for p in progress]
    assert processed == sorted(processed), processed
    assert len(set(processed)) >= 2 and max(processed) > min(processed), processed
    assert all(p["cached"] <= p["processed"] < p["total"] for p in progress), progress
    # "waiting" only before its own read begins (nothing of it read), not once it reads.
    assert all(p["processed"] == p["cached"] for p in progress if p["waiting"]), progress
    assert any(not p["waiting"] and p["processed"] > p["cached"] for p in progress), progress
    assert all(not p["waiting"] for p in progress if p["processed"] > p["cached"]), progress
    # Only while it reads: gone once output begins, and at the end.
    assert all(s["state"] == "running" and s["output_tokens"] == 0 for s in reading)
    assert all("prompt_progress" not in s for s in seen if s["output_tokens"] > 0)
    assert "prompt_progress" not in seen[-1] and seen[-1]["input_tokens"] == prompt_tokens
    # The task list says the same.
    assert in_list, "GET /v1/tasks never showed the prompt being read"
    assert all(t["prompt_progress"]["total"] == prompt_tokens for t in in_list)


def test_a_task_waiting_behind_another_read_says_so_and_a_cancel_keeps_the_lengths(
    live: LiveCore,
) -> None:
    token = live.token(*USER_SCOPES)
    # Two long prompts at once (other texts than the first test's: little is cached). One is
    # read first (first come, first read), the other waits for its last chunk.
    texts = (
        "Read this log. " + LONG_PROMPT.replace("Note", "Entry"),
        "Read this list. " + LONG_PROMPT.replace("Note", "Item"),
    )
    ids = [submit(live, token, text, 50) for text in texts]

    def progress_of(task_id: str) -> dict[str, Any] | None:
        now = task_object_of(live, token, task_id)
        assert now["output_tokens"] == 0, "a read ended before the test saw the other wait"
        return now.get("prompt_progress")

    def first_read() -> str | None:
        for task_id in ids:
            progress = progress_of(task_id)
            if progress and progress["processed"] > progress["cached"]:
                assert not progress["waiting"], progress
                return task_id
        return None

    reader = until_sync(first_read, READ_LIMIT_S, "a prompt read under way")
    [behind] = [task_id for task_id in ids if task_id != reader]

    def waiting() -> dict[str, Any] | None:
        assert first_read() == reader, "the first read ended before the other task showed"
        return progress_of(behind)

    # The waiting task is running and says it waits, with its prompt's length and nothing
    # read yet, not "0 tokens" nor "reading prompt 0/N".
    waits = until_sync(waiting, READ_LIMIT_S, "the waiting task's prompt length")
    assert waits["waiting"] is True, waits
    assert waits["total"] > 2000 and waits["processed"] == waits["cached"] < waits["total"]
    second = task_object_of(live, token, behind)
    assert second["state"] == "running" and second["input_tokens"] == waits["total"]
    assert second["prompt_progress"]["waiting"] is True, second  # still, the read goes on
    reading = task_object_of(live, token, reader)["prompt_progress"]
    assert reading["waiting"] is False and reading["processed"] > reading["cached"], reading

    # `lmsp-desktop tasks` says so in the tokens column: how far the one read is, and that
    # the other one waits.
    shown = cli_beside(live, "tasks")
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines()}
    pattern = re.compile(r"running +- +reading prompt ([\d,]+)/([\d,]+) \((\d+)%\)")
    match = pattern.search(lines[reader])
    assert match, lines[reader]
    done, total = (int(group.replace(",", "")) for group in match.groups()[:2])
    assert 0 < done < total and int(match.group(3)) == done * 100 // total
    assert re.search(
        rf"running +- +waiting to read its prompt \({waits['total']:,} tokens\)  ", lines[behind]
    ), lines[behind]

    # A cancel mid-read stops both, the one being read (over HTTP) and the waiting one (by
    # `lmsp-desktop tasks cancel`); each keeps its prompt's length, in the task object and
    # in its response's usage.
    status, body = call(f"{live.url}/v1/tasks/{reader}/cancel", token, "POST")
    assert status == 200, body
    cancelled = cli_beside(live, "tasks", "cancel", behind)
    assert cancelled.returncode == 0, cancelled.stderr
    lengths = {reader: total, behind: waits["total"]}
    for task_id in ids:
        ended = end_of(live, token, task_id)
        assert ended["state"] == "cancelled" and ended["output_tokens"] == 0
        assert "prompt_progress" not in ended
        assert ended["input_tokens"] == lengths[task_id], (ended, lengths)
        status, response = call(f"{live.url}/v1/responses/{task_id}", token)
        assert status == 200, response
        assert response["usage"]["input_tokens"] == lengths[task_id], response["usage"]


def test_a_task_failed_by_a_restart_mid_read_keeps_its_prompts_length(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The service stops while a task's prompt is read; its policy `fail` fails it at the
    next start, and the task still says how long its prompt was (the stop recorded it)."""
    data_dir = tmp_path_factory.mktemp("prompt-progress-restart")
    first = LiveCore(data_dir)
    try:
        token = first.token(*USER_SCOPES)
        task_id = submit(first, token, "A ledger. " + LONG_PROMPT, 50, on_restart="fail")

        def read_under_way() -> dict[str, Any] | None:
            now = task_object_of(first, token, task_id)
            assert now["output_tokens"] == 0, "its read ended before the stop"
            progress = now.get("prompt_progress")
            return progress if progress and progress["processed"] > progress["cached"] else None

        progress = until_sync(read_under_way, READ_LIMIT_S, "its prompt read under way")
    finally:
        first.stop()
    second = LiveCore(data_dir)
    try:
        ended = task_object_of(second, token, task_id)
        assert ended["state"] == "failed" and ended["output_tokens"] == 0, ended
        assert ended["input_tokens"] == progress["total"] > 2000, ended
        status, response = call(f"{second.url}/v1/responses/{task_id}", token)
        assert status == 200, response
        assert response["usage"]["input_tokens"] == progress["total"], response["usage"]
    finally:
        second.stop()
