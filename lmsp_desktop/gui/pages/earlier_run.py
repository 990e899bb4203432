"""What a task's earlier run wrote before the task started over (policy `retry`: an upstream
cut its stream, or the service restarted). The store discards that output with the restart,
so the Output tab went blank before the task went on or failed; its events still hold it, and
the tab keeps showing it, saying what happened."""

from __future__ import annotations

import json
from typing import Any

from lmsp_desktop.core.states import EventType, TaskState
from lmsp_desktop.gui.core_api import CoreApi

PAGE = 1000


async def earlier_output(core: CoreApi, task_id: str) -> str:
    """The text of the run before the last start-over ("" when there was none or it wrote
    nothing): the text deltas between the run's start and the `response.queued` after it."""
    runs: list[list[str]] = [[]]
    after = 0
    while True:
        rows = await core.task_event_rows(task_id, after, PAGE)
        for row in rows:
            if row["type"] == EventType.OUTPUT_TEXT_DELTA:
                runs[-1].append(json.loads(row["data"]).get("delta", ""))
            elif row["type"] == EventType.QUEUED and runs[-1]:
                runs.append([])  # started over: the next run's text begins afresh
        if len(rows) < PAGE:
            break
        after = rows[-1]["seq"]
    done = runs[:-1] if len(runs) > 1 else []
    return "".join(done[-1]) if done else ""


def with_earlier(row: Any, earlier: str, text: str) -> str:
    """The Output tab's text: the discarded run's output, marked, then this run's."""
    if not earlier:
        return text
    n = row["restarts"]
    head = (
        f"[Started over {n}× (on restart: {row['on_restart']}); "
        "the earlier run's output below was discarded]\n"
    )
    now = text
    if not now and row["state"] == TaskState.FAILED and row["error"]:
        error = json.loads(row["error"])
        now = f"(No output: the task failed ({error['code']}). {error['message']})"
    elif not now and row["state"] in (TaskState.QUEUED, TaskState.LOADING):
        now = "(Waiting in the queue to start over.)"
    return f"{head}{earlier}\n\n[This run]\n{now}"
