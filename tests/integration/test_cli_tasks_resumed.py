"""`lmsp-desktop tasks` after a restart: a task resumed from its snapshot says it waits to
resume, then that it resumes, until its next token; not its output count standing still
while its model loads, nor "reading prompt 0/41 (0%)" afterwards. The engine reads a resumed
task's prompt (one chunk for a short one) and then its earlier tokens again, one at a time as
they were made, before any new one: seconds for a few hundred tokens while the model's other
tasks resume beside it. Its prompt's read began with a report of 0 tokens read, and none
followed until its first new token, so the CLI said it was reading its prompt at 0% all
that while. A real `serve` (real demo model), killed mid-generation and started again."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.serve_process import ServeProcess, call, create_token, lmsp
from tests.integration.service_fixtures import MODEL
from tests.support.polling import until_sync

TASKS = 4  # one per lane of the model (serve's default parallel_per_model): all resume at once
BEFORE_KILL = 150  # output tokens each has when the service is killed: a long replay
LIMIT_S = 600.0  # a bound on a hang on a loaded 2-core machine, not a timing assertion


@pytest.fixture
def no_env_token() -> Iterator[None]:
    """The command run as a user runs it beside the service: it makes its own admin token."""
    saved = os.environ.pop("LMSP_TOKEN", None)
    yield
    if saved is not None:
        os.environ["LMSP_TOKEN"] = saved


def test_a_resumed_task_says_it_resumes_not_reading_its_prompt(
    tmp_path: Path, no_env_token: None
) -> None:
    data_dir = tmp_path / "data"
    serve = ServeProcess(data_dir)
    url = serve.start()
    token = create_token(data_dir)
    try:
        ids = []
        for n in range(TASKS):
            body = {
                "model": MODEL,
                "input": f"Write a very long story about lighthouse keeper number {n}.",
                "max_output_tokens": 2000,
                "background": True,
                "on_restart": "resume",
            }
            status, created = call(f"{url}/v1/responses", token, "POST", body)
            assert status == 202, created
            ids.append(created["id"])

        def outputs(url: str) -> dict[str, dict[str, Any]]:
            status, listed = call(f"{url}/v1/tasks?limit=100", token)
            assert status == 200, listed
            return {t["id"]: t for t in listed["data"] if t["id"] in ids}

        def all_long() -> dict[str, dict[str, Any]] | None:
            now = outputs(url)
            assert all(t["state"] in ("queued", "loading", "running") for t in now.values()), now
            return now if all(t["output_tokens"] >= BEFORE_KILL for t in now.values()) else None

        until_sync(all_long, LIMIT_S, f"{BEFORE_KILL} tokens in each task", interval=0.5)
        serve.kill()
        url = serve.start()
        before = {t["id"]: t["output_tokens"] for t in outputs(url).values()}

        # `lmsp-desktop tasks` again and again while they resume, until each has new tokens.
        seen: dict[str, list[str]] = {task_id: [] for task_id in ids}

        def resumed() -> bool:
            shown = lmsp("tasks", data_dir=data_dir)
            assert shown.returncode == 0, shown.stderr
            for line in shown.stdout.splitlines()[1:]:
                task_id, tokens = line.split()[0], tokens_cell(line)
                seen[task_id].append(tokens)
            return all(
                any(t.isdigit() and int(t) > before[task_id] for t in seen[task_id])
                for task_id in ids
            )

        until_sync(resumed, LIMIT_S, lambda: f"new tokens in each task; the CLI said {seen}")
    finally:
        for task_id in ids:
            call(f"{url}/v1/tasks/{task_id}/cancel", token, "POST")
        serve.terminate()

    said = [cell for cells in seen.values() for cell in cells]
    # Never the read's stale figure for a task that resumes, nor its output count standing
    # still while its model loads as if it generated.
    assert not [cell for cell in said if cell.startswith("reading prompt")], seen
    assert not [t for t, cells in seen.items() if str(before[t]) in cells], (before, seen)
    # While it catches up it says so, with the tokens it has.
    resuming = re.compile(r"^(waiting to resume|resuming) \(([\d,]+) tokens so far\)$")
    catching_up = [
        (task_id, match)
        for task_id, cells in seen.items()
        for cell in cells
        if (match := resuming.match(cell))
    ]
    assert catching_up, seen  # (the CLI's runs take a second or so: not every phase is seen)
    assert all(int(m.group(2).replace(",", "")) == before[t] for t, m in catching_up), seen


def tokens_cell(line: str) -> str:
    """The TOKENS cell of a `tasks` line: between the QUEUE cell and the AGE ("12 s")."""
    cells = re.split(r"\s{2,}", line.strip())
    return cells[5]
