"""Task list filters and cursor paging, the OpenAPI document, metrics, the recovery report."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp

from tests.integration.service_fixtures import (
    LONG,
    MODEL,
    Client,
    LiveCore,
    auth,
    cancel,
    create_background,
    expect_error,
    occupy_model,
    wait_state,
)

pytest_plugins = ["tests.integration.service_fixtures"]


async def list_ids(
    http: aiohttp.ClientSession, client: Client, **params: Any
) -> tuple[list[str], bool]:
    async with http.get("/v1/tasks", params=params, headers=client.headers) as r:
        page = await r.json()
        assert r.status == 200, page
    assert page["object"] == "list"
    return [t["id"] for t in page["data"]], page["has_more"]


async def test_filters_and_cursor_paging(http: aiohttp.ClientSession, user: Client) -> None:
    blocker = await occupy_model(http, user.headers)
    try:
        queued = [await create_background(http, user.headers) for _ in range(5)]
        for task in queued[:2]:
            await cancel(http, user.headers, task["id"])
        newest_first = [t["id"] for t in reversed(queued)] + [blocker["id"]]

        assert await list_ids(http, user, limit=100) == (newest_first, False)
        still_queued = [t["id"] for t in reversed(queued[2:])]
        assert await list_ids(http, user, state="queued") == (still_queued, False)
        cancelled = [t["id"] for t in reversed(queued[:2])]
        assert await list_ids(http, user, state="cancelled") == (cancelled, False)
        assert await list_ids(http, user, state="running") == ([blocker["id"]], False)
        both = (still_queued + cancelled, False)
        assert await list_ids(http, user, state="queued,cancelled") == both
        async with http.get("/v1/tasks?state=queued&state=cancelled", headers=user.headers) as r:
            assert [t["id"] for t in (await r.json())["data"]] == both[0]
        assert await list_ids(http, user, model=MODEL) == (newest_first, False)
        assert await list_ids(http, user, model="other-model") == ([], False)

        # Queue positions are 1-based in submission order while queued, else null.
        async with http.get("/v1/tasks", params={"state": "queued"}, headers=user.headers) as r:
            positions = [t["queue_position"] for t in (await r.json())["data"]]
        assert positions == [3, 2, 1]
        async with http.get(f"/v1/tasks/{blocker['id']}", headers=user.headers) as r:
            assert (await r.json())["queue_position"] is None

        # Cursor paging: pages of two, `after` the last id seen, has_more until the end.
        seen: list[str] = []
        after: str | None = None
        pages = 0
        while True:
            params: dict[str, Any] = {"limit": 2}
            if after:
                params["after"] = after
            ids, has_more = await list_ids(http, user, **params)
            pages += 1
            assert len(ids) <= 2
            seen += ids
            if not has_more:
                break
            after = ids[-1]
        assert seen == newest_first and pages == 3
        # Paging combines with filters.
        ids, has_more = await list_ids(http, user, state="queued", limit=2)
        assert (ids, has_more) == (still_queued[:2], True)
        ids, has_more = await list_ids(http, user, state="queued", limit=2, after=ids[-1])
        assert (ids, has_more) == (still_queued[2:], False)
        async with http.get("/v1/tasks", params={"limit": 0}, headers=user.headers) as r:
            await expect_error(r, 400, param="limit")
    finally:
        for task_id in [blocker["id"], *(t["id"] for t in queued)]:
            await cancel(http, user.headers, task_id)


async def test_task_object_shape(http: aiohttp.ClientSession, user: Client) -> None:
    async with http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "Hi", "max_output_tokens": 8, "temperature": 0},
        headers=user.headers,
    ) as r:
        done = await r.json()
    async with http.get(f"/v1/tasks/{done['id']}", headers=user.headers) as r:
        task = await r.json()
    assert set(task) >= {
        "id",
        "object",
        "state",
        "on_restart",
        "model",
        "client_id",
        "queue_position",
        "created_at",
        "started_at",
        "finished_at",
        "restarts",
        "last_sequence_number",
        "output_tokens",
        "error",
    }
    assert task["object"] == "task" and task["id"] == done["id"]
    assert task["state"] in ("completed", "incomplete") and task["on_restart"] == "fail"
    assert task["client_id"] == user.id and task["restarts"] == 0 and task["error"] is None
    assert task["created_at"] <= task["started_at"] <= task["finished_at"]
    assert all(isinstance(task[k], int) for k in ("created_at", "started_at", "finished_at"))
    assert task["last_sequence_number"] >= 8 and task["output_tokens"] == 8
    assert done["task"] == task


async def test_openapi_document_is_valid_and_lists_every_route(
    http: aiohttp.ClientSession, live: LiveCore
) -> None:
    from openapi_spec_validator import validate

    async with http.get("/v1/openapi.json") as r:
        assert r.status == 200
        document = await r.json()
    assert document["openapi"].startswith("3.1")
    validate(document)  # raises on an invalid OpenAPI 3.1 document
    assert document["servers"][0]["url"] == live.url
    documented = {
        (method.upper(), path)
        for path, ops in document["paths"].items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert live.core.host is not None
    served = set()
    for route in live.core.host.app.router.routes():
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter")
        if route.method in ("HEAD", "*") or path is None:
            continue  # HEAD mirrors GET; "*" is the catch-all 404
        served.add((route.method, path))
    assert served == documented


async def test_metrics_are_prometheus_text(
    http: aiohttp.ClientSession, admin: Client, user: Client
) -> None:
    async def scrape() -> dict[str, float]:
        async with http.get("/v1/metrics", headers=admin.headers) as r:
            assert r.status == 200
            assert r.content_type == "text/plain"
            text = await r.text()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("#"):
                assert re.fullmatch(r"# (HELP|TYPE) lmsp_\w+ .+", line), line
                continue
            name, value = line.rsplit(" ", 1)
            assert re.fullmatch(r'lmsp_\w+(\{\w+="[\w:.-]*"\})?', name), line
            values[name] = float(value)
        return values

    before = await scrape()
    for state in (
        "queued",
        "loading",
        "running",
        "cancelling",
        "completed",
        "incomplete",
        "failed",
        "cancelled",
    ):
        assert f'lmsp_tasks{{state="{state}"}}' in before
    for name in (
        "lmsp_queue_depth",
        "lmsp_events_written_total",
        "lmsp_events_stored",
        "lmsp_output_tokens_stored",
    ):
        assert name in before
    async with http.post(
        "/v1/responses",
        json={"model": MODEL, "input": "Hi", "max_output_tokens": 8, "temperature": 0},
        headers=user.headers,
    ) as r:
        done = await r.json()
    after = await scrape()
    finished = f'lmsp_tasks{{state="{done["task"]["state"]}"}}'
    assert after[finished] == before[finished] + 1
    assert after["lmsp_output_tokens_stored"] >= before["lmsp_output_tokens_stored"] + 8
    assert after["lmsp_events_stored"] >= before["lmsp_events_stored"] + 8
    # The counter counts every event of the new task (created … done, 8 deltas at least).
    written = after["lmsp_events_written_total"] - before["lmsp_events_written_total"]
    assert written >= done["task"]["last_sequence_number"]
    # Deleting the task lowers what is stored, never the counter.
    async with http.delete(f"/v1/responses/{done['id']}", headers=user.headers) as r:
        assert r.status == 200
    final = await scrape()
    assert final["lmsp_events_written_total"] >= after["lmsp_events_written_total"]
    assert final["lmsp_events_stored"] < after["lmsp_events_stored"]
    async with http.get("/v1/metrics", headers=user.headers) as r:
        await expect_error(r, 403, "insufficient_scope")


def test_recovery_report_after_a_stop_with_work_in_flight(tmp_path: Path) -> None:
    """A task running at a graceful stop is failed at the next start (policy `fail`), and
    /v1/recovery/last tells what happened; the failed response is still a valid object."""
    data_dir = tmp_path / "recover"
    first = LiveCore(data_dir)
    token = first.token("admin", name="recovery-admin")
    headers = auth(token)

    async def start_work() -> str:
        async with aiohttp.ClientSession(base_url=first.url) as http:
            task = await create_background(http, headers, **LONG)
            await wait_state(http, headers, task["id"], ("running",))
            return str(task["id"])

    task_id = asyncio.run(start_work())
    first.stop()
    second = LiveCore(data_dir)

    async def check() -> None:
        async with aiohttp.ClientSession(base_url=second.url) as http:
            async with http.get("/v1/recovery/last", headers=headers) as r:
                assert r.status == 200
                report = await r.json()
            assert report["started_at"] <= report["finished_at"]
            [item] = report["items"]
            assert item["task_id"] == task_id and item["model"] == MODEL
            assert (item["state_before"], item["on_restart"], item["state_after"]) == (
                "running",
                "fail",
                "failed",
            )
            assert item["event_type"] == "response.failed"
            async with http.get(f"/v1/responses/{task_id}", headers=headers) as r:
                failed = await r.json()
            assert failed["status"] == "failed"
            assert failed["error"]["code"] == "server_restarted"
            assert failed["task"]["last_sequence_number"] == item["sequence_number"]

    try:
        asyncio.run(check())
    finally:
        second.stop()
