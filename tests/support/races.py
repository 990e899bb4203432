"""Cancel/complete races (LMSP 11.2: the cancel transition is atomic, completion conditional).

Two drivers: the store itself (a real TaskStore on a real file; `finish` raced against `cancel`
at random offsets of the event loop's scheduling, concluded the way the runner concludes: half
the finishes ride with the task's last deltas, as a plain generation's), and
a real service over HTTP (cancel fired at random offsets around the measured completion time,
through `POST /v1/responses/{id}/cancel` and through `Core.cancel`, the GUI's call).
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from lmsp_desktop.core.api.responses.request import parse_create
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.states import STATE_OF_EVENT
from lmsp_desktop.core.storage.store import Store
from lmsp_desktop.core.storage.tasks import NewTask, finishing
from tests.support.polling import until

MODEL = "smollm2-135m-instruct"
REQUEST = parse_create({"model": MODEL, "input": "race"}, "fail")


@dataclass
class RaceFigures:
    races: int = 0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    violations: list[str] = field(default_factory=list)

    def summary(self, what: str) -> str:
        return (
            f"{what}: races={self.races} "
            + " ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items()))
            + f" violations={len(self.violations)}"
        )


def history_violations(task_id: str, state: str, types: list[str]) -> list[str]:
    problems = []
    if "response.cancelled" in types and "response.completed" in types:
        problems.append(f"{task_id}: both response.cancelled and response.completed")
    implied = STATE_OF_EVENT.get(types[-1]) if types else None
    if implied is None or implied.value != state:
        problems.append(f"{task_id}: state {state} but last event {types[-1:]}")
    return problems


async def _after_ticks(ticks: int, coro: Any) -> Any:
    for _ in range(ticks):
        await asyncio.sleep(0)
    return await coro


async def _one_store_race(store: Store, rng: random.Random, figures: RaceFigures) -> None:
    tasks = store.tasks
    created = await tasks.create(NewTask(model=MODEL, request=REQUEST, mode="background"))
    task_id = created.task_id
    assert await tasks.mark_running(task_id) is not None
    before = "ab" if rng.random() < 0.5 else ""
    if before:
        await tasks.append_deltas(
            task_id, ["a", "b"], output_tokens=2, input_tokens=3, snapshot=None
        )
    # The runner's two ways to finish: with the last deltas (a plain generation), or as a move
    # of its own (tool calls, stop sequences).
    with_last = rng.random() < 0.5
    final = before + ("cd" if with_last else "")

    async def finish() -> str:
        # As the runner does: finish only if still running; else confirm the cancel.
        if with_last:
            done = await tasks.append_deltas(
                task_id,
                ["c", "d"],
                output_tokens=len(final),
                input_tokens=3,
                snapshot={"tokens": list(range(len(final)))},
                finish=finishing(
                    task_id, incomplete_reason=None, input_tokens=3, output_tokens=len(final)
                ),
            )
        else:
            done = await tasks.finish(
                task_id, incomplete_reason=None, input_tokens=3, output_tokens=len(final)
            )
        if not done:
            await tasks.confirm_cancelled(task_id)
        return "finished" if done else "refused"

    async def cancel() -> str:
        try:
            row = await tasks.cancel(task_id)
        except LmspError as exc:
            return f"cancel_{exc.status}"
        return f"cancel_{row['state']}"

    spread = rng.choice([2, 8, 30])
    finished, cancelled = await asyncio.gather(
        _after_ticks(rng.randint(0, spread), finish()),
        _after_ticks(rng.randint(0, spread), cancel()),
    )
    row = await tasks.get(task_id)
    types = [r["type"] for r in await tasks.event_rows(task_id)]
    figures.races += 1
    figures.outcomes[row["state"]] += 1
    figures.violations += history_violations(task_id, row["state"], types)
    # What each caller was told agrees with the outcome.
    if finished == "finished" and (row["state"] != "completed" or cancelled != "cancel_409"):
        figures.violations.append(f"{task_id}: finish won but {row['state']}, {cancelled}")
    if finished == "refused" and (row["state"] != "cancelled" or cancelled != "cancel_cancelling"):
        figures.violations.append(f"{task_id}: cancel won but {row['state']}, {cancelled}")
    # A completed task has all its text; a cancelled one none of the finishing hand-over.
    text = {"completed": final, "cancelled": before}.get(row["state"])
    if row["output_text"] != text:
        figures.violations.append(f"{task_id}: {row['state']} with text {row['output_text']!r}")
    figures.outcomes[f"{row['state']} ({'with the last deltas' if with_last else 'alone'})"] += 1


async def store_races(
    store: Store, count: int, *, seed: int = 0, parallel: int = 25
) -> RaceFigures:
    """`count` races, `parallel` at a time (so transactions of different tasks interleave)."""
    rng = random.Random(seed)
    figures = RaceFigures()
    done = 0
    while done < count:
        batch = min(parallel, count - done)
        await asyncio.gather(*(_one_store_race(store, rng, figures) for _ in range(batch)))
        done += batch
    return figures


async def _wait_final(
    http: aiohttp.ClientSession, headers: dict[str, str], task_id: str
) -> dict[str, Any]:

    async def final() -> dict[str, Any] | None:
        async with http.get(f"/v1/tasks/{task_id}", headers=headers) as r:
            task: dict[str, Any] = await r.json()
        return task if task["state"] in ("completed", "incomplete", "failed", "cancelled") else None

    return await until(final, limit=30, interval=0.005, what=f"{task_id} to finish")


async def _events(http: aiohttp.ClientSession, headers: dict[str, str], task_id: str) -> list[str]:
    async with http.get(f"/v1/tasks/{task_id}/events?limit=1000", headers=headers) as r:
        page = await r.json()
    return [e["type"] for e in page["data"]]


async def http_races(
    http: aiohttp.ClientSession,
    headers: dict[str, str],
    gui_cancel: Any,
    count: int,
    *,
    seed: int = 0,
) -> RaceFigures:
    """Races through a real service: every other cancel is the GUI's `Core.cancel`."""
    rng = random.Random(seed)
    figures = RaceFigures()
    body = {"model": MODEL, "input": "race", "background": True}

    async def create() -> str:
        async with http.post("/v1/responses", json=body, headers=headers) as r:
            answer = await r.json()
            assert r.status == 202, answer
            return str(answer["id"])

    # Calibrate: how long from the 202 to the completion, without a cancel.
    samples = []
    for _ in range(5):
        started = time.monotonic()
        task_id = await create()
        await _wait_final(http, headers, task_id)
        samples.append(time.monotonic() - started)
    typical = calibrated = sorted(samples)[len(samples) // 2]
    for i in range(count):
        task_id = await create()
        await asyncio.sleep(rng.uniform(0.3, 1.3) * typical)
        if i % 2:
            try:
                await gui_cancel(task_id)
                said = "gui_ok"
            except LmspError as exc:
                said = f"gui_{exc.status}"
        else:
            async with http.post(f"/v1/responses/{task_id}/cancel", headers=headers) as r:
                said = f"http_{r.status}"
                if r.status not in (200, 409):
                    figures.violations.append(f"{task_id}: cancel answered {r.status}")
        task = await _wait_final(http, headers, task_id)
        types = await _events(http, headers, task_id)
        figures.races += 1
        figures.outcomes[task["state"]] += 1
        # Follow the machine's pace: the calibration drifts when the load changes (another
        # test worker starts or ends), and offsets that all land after the completion race
        # nothing. Nudge the delay towards the moment both sides win equally often.
        typical *= 0.95 if task["state"] == "completed" else 1.05
        figures.violations += history_violations(task_id, task["state"], types)
        if said.endswith("409") and task["state"] not in ("completed", "incomplete"):
            figures.violations.append(f"{task_id}: cancel refused (409) but {task['state']}")
        if said.endswith(("ok", "200")) and task["state"] != "cancelled":
            figures.violations.append(f"{task_id}: cancel accepted but {task['state']}: {types}")
    figures.outcomes["calibrated_ms"] = int(calibrated * 1000)
    return figures


__all__ = ["RaceFigures", "http_races", "store_races"]
