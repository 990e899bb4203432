"""Following tasks of a real `serve` over HTTP, for the resume-after-kill modules: waits on
a task's state (a poll, where a kill must land at a token count) or on its end (its event
stream, which the service closes when the task ends), a task's uninterrupted text, and the
kill -9 and restart loop both modules run."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.integration.serve_process import ServeProcess, call
from tests.support.polling import until_sync


def finished(task: dict[str, Any]) -> bool:
    return task["state"] in ("completed", "incomplete", "failed", "cancelled")


def wait_task(
    url: str,
    token: str,
    task_id: str,
    predicate: Callable[[dict[str, Any]], bool],
    timeout: float = 600.0,
) -> dict[str, Any]:
    """The task once `predicate` holds, polled every 20 ms: a kill waits on a token count,
    which no event carries."""
    seen: list[Any] = [None]

    def reached() -> Any:
        status, seen[0] = call(f"{url}/v1/tasks/{task_id}", token)
        assert status == 200, seen[0]
        return seen[0] if predicate(seen[0]) else None

    return until_sync(reached, timeout, lambda: f"task {task_id} to get there: {seen[0]}")  # type: ignore[no-any-return]


def wait_finished(url: str, token: str, task_id: str, timeout: float = 600.0) -> dict[str, Any]:
    """The task once it has ended: its event stream (SSE) replayed and followed until the
    service closes it at the task's end, one request instead of a poll every 20 ms.
    `timeout` bounds each read (the suite's timeout bounds the whole)."""
    request = urllib.request.Request(
        f"{url}/v1/tasks/{task_id}/events",
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as stream:
        for _line in stream:
            pass
    status, task = call(f"{url}/v1/tasks/{task_id}", token)
    assert status == 200 and finished(task), task
    return task  # type: ignore[no-any-return]


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
