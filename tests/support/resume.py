"""Following tasks of a real `serve` over HTTP, for the resume-after-kill modules: waits on
a task's state (a poll, where a kill must land at a token count) or on its end (its event
stream, which the service closes when the task ends), and a task's uninterrupted text."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.integration.serve_process import call
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


def set_settings(data_dir: Path, **values: object) -> None:
    """Store settings in a stopped service's database, as the Settings dialog would."""
    with sqlite3.connect(data_dir / "lmsp.db") as conn:
        row = conn.execute("SELECT value FROM service_config WHERE key='settings'").fetchone()
        settings = {**(json.loads(row[0]) if row else {}), **values}
        conn.execute(
            "INSERT OR REPLACE INTO service_config (key, value) VALUES ('settings', ?)",
            (json.dumps(settings),),
        )
