"""Following tasks of a real `serve` over HTTP, for the resume-after-kill modules: waits on
a task's state (where a kill must land at a token count) or on its end, both on its event
stream (which the service closes when the task ends), a task's uninterrupted text, and the
kill -9 and restart loop both modules run."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.integration.serve_process import ServeProcess, call

# Each sequence's context in the modules' services (serve --max-context): room for their
# longest run (534 prompt tokens and 40 more; a neighbour ~100), and an eighth of the KV
# cache the demo model gets by default (8192 tokens a sequence), which llama.cpp allocates
# and clears for every context at every start and restart: CPU no claim here is about.
SERVE_FLAGS = ("--max-context", "1024")


def finished(task: dict[str, Any]) -> bool:
    return task["state"] in ("completed", "incomplete", "failed", "cancelled")


def wait_task(
    url: str,
    token: str,
    task_id: str,
    predicate: Callable[[dict[str, Any]], bool],
    timeout: float = 600.0,
) -> dict[str, Any]:
    """The task once `predicate` holds: read now, then again at each event its stream (SSE)
    sends from there on. The tokens a kill waits for are committed with their deltas, and
    the end with its event, which the service sends after the commit (rule 11.2), so the
    read after an event sees them; the count itself is in no event, hence the read. A poll
    every 20 ms had the service answer ~800 requests a module while the machine decoded.
    `timeout` bounds each read (the suite's timeout bounds the whole)."""
    task = _task(url, token, task_id)
    if predicate(task):
        return task
    with _events(url, token, task_id, task["last_sequence_number"], timeout) as stream:
        for line in stream:
            if line.startswith(b"data:"):
                task = _task(url, token, task_id)
                if predicate(task):
                    return task
    task = _task(url, token, task_id)  # the stream ended with the task
    assert predicate(task), f"task {task_id} ended without getting there: {task}"
    return task


def _task(url: str, token: str, task_id: str) -> dict[str, Any]:
    status, task = call(f"{url}/v1/tasks/{task_id}", token)
    assert status == 200, task
    return task  # type: ignore[no-any-return]


def _events(url: str, token: str, task_id: str, after: int, timeout: float) -> Any:
    """The task's event stream (SSE) after sequence number `after`: replayed, then followed
    until the service closes it at the task's end."""
    request = urllib.request.Request(
        f"{url}/v1/tasks/{task_id}/events?after={after}",
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    )
    return urllib.request.urlopen(request, timeout=timeout)


def wait_finished(url: str, token: str, task_id: str, timeout: float = 600.0) -> dict[str, Any]:
    """The task once it has ended: its event stream (SSE) replayed and followed until the
    service closes it at the task's end, one request instead of a poll every 20 ms.
    `timeout` bounds each read (the suite's timeout bounds the whole)."""
    with _events(url, token, task_id, 0, timeout) as stream:
        for _line in stream:
            pass
    task = _task(url, token, task_id)
    assert finished(task), task
    return task


def reference_text(url: str, token: str, body: dict[str, Any]) -> str:
    """An uninterrupted run's text (in the background: a long prompt outlasts a request's
    timeout on a busy machine)."""
    status, created = call(f"{url}/v1/responses", token, "POST", {**body, "background": True})
    assert status == 202, created
    wait_finished(url, token, created["id"])
    status, response = call(f"{url}/v1/responses/{created['id']}", token)
    assert status == 200, response
    assert response["usage"]["output_tokens"] > 20  # long enough to kill at several points
    return response["output_text"]  # type: ignore[no-any-return]


def kill_at(
    server: ServeProcess, token: str, task_id: str, cuts: Sequence[int], *, relative: bool = False
) -> tuple[str, int]:
    """SIGKILL the running `server` once the task has made `cut` output tokens, for each cut
    in turn, and start it again: the restarted service's URL and the kills done, fewer than
    the cuts when the task ended first (the caller asserts the count). With `relative`, a
    cut counts the tokens made beyond what the previous kill left committed, read after the
    restart: on a busy machine a service starved while the worker decoded commits many tokens
    at once, so a fixed late cut could find the task already ended."""
    url, kills, committed = server.url, 0, 0
    for cut in cuts:
        goal = committed + cut if relative else cut
        task = wait_task(
            url, token, task_id, lambda t, g=goal: t["output_tokens"] >= g or finished(t)
        )
        if finished(task):
            break
        server.kill()
        kills += 1
        url = server.start()
        if relative:
            status, task = call(f"{url}/v1/tasks/{task_id}", token)  # what the kill left
            assert status == 200, task
            committed = task["output_tokens"]
    return url, kills


def set_settings(data_dir: Path, **values: object) -> None:
    """Store settings in a stopped service's database, as the Settings dialog would."""
    with sqlite3.connect(data_dir / "lmsp.db") as conn:
        row = conn.execute("SELECT value FROM service_config WHERE key='settings'").fetchone()
        settings = {**(json.loads(row[0]) if row else {}), **values}
        conn.execute(
            "INSERT OR REPLACE INTO service_config (key, value) VALUES ('settings', ?)",
            (json.dumps(settings),),
        )
