"""Download tasks in the store: created with their first event, progress while running.

A download is a task like any other (kind `download`): the same states, cancel transition,
restart policies and recovery. Its `request` keeps what to fetch (repo, revision, files with
their sizes and sha256); its `snapshot` the latest progress, which the task list shows.
Moving it through its states uses TaskStore's own moves (mark_running, finish, fail,
confirm_cancelled).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

from lmsp_desktop.core.api.resource import task_object
from lmsp_desktop.core.ids import new_id
from lmsp_desktop.core.states import EventType, RestartPolicy, TaskKind, TaskState
from lmsp_desktop.core.storage.events import response_of, with_response
from lmsp_desktop.core.storage.idempotency import IdempotencyClaim, mark_done
from lmsp_desktop.core.storage.task_reads import queue_length_in, row_in
from lmsp_desktop.core.storage.tasks import TaskStore, _still_running
from lmsp_desktop.core.storage.transitions import append_events
from lmsp_desktop.core.views import TaskChange


@dataclass
class NewDownload:
    """A validated request to fetch files of one hub repo into the Hugging Face cache."""

    repo: str
    revision: str  # as asked (a branch, usually main)
    commit: str  # what it pointed at when asked: a resumed download fetches the same bytes
    files: list[dict[str, Any]]  # {name, size, sha256}: a model, or a split model's parts
    model: str  # the name the task shows: repo:QUANT or repo:file
    # Resume by default: the bytes already on disk are kept across a restart.
    on_restart: RestartPolicy = RestartPolicy.RESUME
    client_id: str | None = None
    id: str = field(default_factory=lambda: new_id("dl"))

    def request(self) -> dict[str, Any]:
        return {
            "api": "download",
            "repo": self.repo,
            "revision": self.revision,
            "commit": self.commit,
            "files": self.files,
            "bytes_total": sum(int(f.get("size") or 0) for f in self.files),
        }


async def create_download(
    tasks: TaskStore, spec: NewDownload, claim: IdempotencyClaim | None = None
) -> dict[str, Any]:
    """Commit the download task and its `response.created` event in one transaction (with,
    under `claim`, the key's answer: a retry replays the 202); the task object (the 202
    body) once committed.

    A pull of files a download task is already fetching (not yet cancelling or ended)
    answers with that task instead of a second one, as Ollama's pull joins the one under
    way: a double-clicked Download, or a script that pulls again, follows one transfer.
    Checked inside the write transaction, so two pulls at once cannot both create."""
    now = int(time.time())
    created = True

    def work(conn: sqlite3.Connection) -> dict[str, Any]:
        nonlocal created
        joined = _same_download_under_way(conn, spec)
        if joined is not None:
            created = False
            task = task_object(row_in(conn, joined), queue_length_in(conn, spec.model))
            if claim is not None:
                mark_done(conn, claim, 202, task)
            return task
        conn.execute(
            "INSERT INTO responses (id, created_at, model, request) VALUES (?, ?, ?, ?)",
            (spec.id, now, spec.model, json.dumps(spec.request())),
        )
        conn.execute(
            "INSERT INTO tasks (id, client_id, model, state, on_restart, mode, created_at,"
            " last_seq, kind) VALUES (?, ?, ?, 'queued', ?, 'background', ?, 0, ?)",
            (spec.id, spec.client_id, spec.model, str(spec.on_restart), now, TaskKind.DOWNLOAD),
        )
        row = row_in(conn, spec.id)
        position = queue_length_in(conn, spec.model)  # the new task is its queue's last
        body = response_of(row, position)
        body["task"]["last_sequence_number"] = 1
        append_events(conn, spec.id, 0, [with_response(EventType.CREATED, body)])
        task = task_object(row_in(conn, spec.id), position)
        if claim is not None:
            mark_done(conn, claim, 202, task)
        return task

    task = await tasks.db.run(work)
    if created:
        change = TaskChange(
            spec.id, TaskState.QUEUED, 1, spec.model, (EventType.CREATED,), kind="download"
        )
        tasks.publish([change])
    return task


def _same_download_under_way(conn: sqlite3.Connection, spec: NewDownload) -> str | None:
    """The id of a queued or running download of the same repo, commit and files."""
    wanted = (spec.repo, spec.commit, sorted(f["name"] for f in spec.files))
    rows = conn.execute(
        "SELECT t.id, r.request FROM tasks t JOIN responses r ON r.id = t.id"
        " WHERE t.kind = ? AND t.state IN (?, ?, ?) ORDER BY t.created_at",
        (TaskKind.DOWNLOAD, TaskState.QUEUED, TaskState.LOADING, TaskState.RUNNING),
    )
    for task_id, request in rows:
        asked = json.loads(request)
        if (asked["repo"], asked["commit"], sorted(f["name"] for f in asked["files"])) == wanted:
            return str(task_id)
    return None


async def record_progress(tasks: TaskStore, task_id: str, progress: dict[str, Any]) -> bool:
    """Append a `download.progress` event (bytes_done, bytes_total, …) and keep it as the
    task's latest progress, only while the task is running (False otherwise: a cancel was
    committed, the caller stops)."""

    def work(conn: sqlite3.Connection) -> tuple[int, str] | None:
        found = _still_running(conn, task_id, json.dumps(progress))
        if found is None:
            return None
        event = {"type": str(EventType.DOWNLOAD_PROGRESS), "task_id": task_id, **progress}
        return append_events(conn, task_id, found[0], [event]), found[1]

    done = await tasks.db.run(work)
    if done is None:
        return False
    change = TaskChange(
        task_id,
        TaskState.RUNNING,
        done[0],
        done[1],
        (EventType.DOWNLOAD_PROGRESS,),
        kind=TaskKind.DOWNLOAD,
    )
    tasks.publish([change])
    return True
