"""Idempotency storms through a real service: 1,000 concurrent creates with one key make
exactly one task (counted in the database file); the key with another body is refused 422;
a retry while the first (sync) request is still being answered is refused 409."""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import threading
from pathlib import Path
from typing import Any

import aiohttp

from lmsp_desktop.core.engines.fake import FakeEngine
from tests.support.fake_core import MODEL, running_core, session, token

STORM = 1000


def count_tasks(data_dir: Path) -> int:
    conn = sqlite3.connect(f"file:{data_dir / 'lmsp.db'}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
    finally:
        conn.close()


async def post(
    http: aiohttp.ClientSession, body: dict[str, Any], key: str
) -> tuple[int, dict[str, Any], str | None]:
    async with http.post("/v1/responses", json=body, headers={"Idempotency-Key": key}) as r:
        return r.status, await r.json(), r.headers.get("Idempotent-Replayed")


async def test_a_thousand_concurrent_background_creates_make_one_task(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with running_core(data_dir) as core, session(core, await token(core)) as http:
        body = {"model": MODEL, "input": "storm", "background": True}
        answers = await asyncio.gather(*(post(http, body, "storm-1") for _ in range(STORM)))
        statuses = collections.Counter(status for status, _, _ in answers)
        ids = {answer["id"] for _, answer, _ in answers}
        replayed = sum(1 for _, _, flag in answers if flag == "true")
        assert statuses == {202: STORM}, statuses
        assert len(ids) == 1, ids
        assert replayed == STORM - 1
        assert count_tasks(data_dir) == 1

        status, answer, _ = await post(http, {**body, "input": "another"}, "storm-1")
        assert status == 422, answer
        assert answer["error"]["code"] == "idempotency_key_reused"
        assert count_tasks(data_dir) == 1
    print(f"idempotency storm: {STORM} concurrent creates, statuses {dict(statuses)}, 1 task")


async def test_a_storm_on_a_sync_request_in_flight_gets_409_and_one_task(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)  # the first request's generation waits for us
    async with running_core(data_dir, engine) as core, session(core, await token(core)) as http:
        body = {"model": MODEL, "input": "sync storm"}
        first = asyncio.create_task(post(http, body, "sync-1"))
        for _ in range(1000):  # until the first request's task is committed
            if count_tasks(data_dir):
                break
            await asyncio.sleep(0.01)
        answers = await asyncio.gather(*(post(http, body, "sync-1") for _ in range(STORM)))
        statuses = collections.Counter(status for status, _, _ in answers)
        assert statuses == {409: STORM}, statuses
        assert {a["error"]["code"] for _, a, _ in answers} == {"idempotency_key_in_use"}
        status, answer, _ = await post(http, {**body, "input": "other"}, "sync-1")
        assert status == 422, answer
        assert count_tasks(data_dir) == 1

        engine.gate.release(100)
        status, final, _ = await first
        assert status == 200 and final["status"] == "completed", final
        status, again, flag = await post(http, body, "sync-1")
        assert (status, flag, again["id"]) == (200, "true", final["id"])
        assert again["output_text"] == final["output_text"]
        assert count_tasks(data_dir) == 1
