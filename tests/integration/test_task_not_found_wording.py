"""Another client's download, cancelled by a client that does not own it (POST
/v1/tasks/{id}/cancel, POST /v1/responses/{id}/cancel, `lmsp-desktop tasks cancel` with that
client's LMSP_TOKEN): still 404, so that another client's task is not revealed, but it said
"No response with id …" of a download, which is no response. A real service (Core with its
DownloadManager) fetching from the fake hub on loopback; the real CLI beside it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.integration.serve_process import call, lmsp
from tests.integration.service_fixtures import LiveCore, task_object_of
from tests.support.hub_repos import TINY_REPO, Hub

pytest_plugins = ["tests.integration.download_fixtures"]
pytestmark = pytest.mark.slow


async def test_a_download_cancelled_by_a_client_not_its_owner_is_no_task_of_that_client(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = await asyncio.to_thread(LiveCore, tmp_path / "data")
    try:
        admin = await asyncio.to_thread(live.token, "admin")
        other = await asyncio.to_thread(
            live.token, "responses:read", "responses:write", name="laptop"
        )
        hub.server.bytes_per_s = 64 * 1024  # its 3 MiB take ~48 s: running while refused
        pull = {"repo": TINY_REPO, "quant": "Q4_K_M"}
        status, task = await asyncio.to_thread(
            call, f"{live.url}/v1/models/pull", admin, "POST", pull
        )
        assert status == 202, task
        task_id = task["id"]

        for path in (f"/v1/tasks/{task_id}/cancel", f"/v1/responses/{task_id}/cancel"):
            status, body = await asyncio.to_thread(call, f"{live.url}{path}", other, "POST")
            assert status == 404, body
            error = body["error"]
            assert error["code"] == "response_not_found"  # the code clients match, kept
            assert error["message"].startswith(f"No task with id '{task_id}' for this client")
            assert "response" not in error["message"]
        # An unknown id reads the same: whether the task exists is not revealed.
        status, unknown = await asyncio.to_thread(
            call, f"{live.url}/v1/tasks/dl_nothing/cancel", other, "POST"
        )
        assert status == 404
        assert unknown["error"]["message"] == body["error"]["message"].replace(
            task_id, "dl_nothing"
        )

        # Its owner, at the Responses route: told what the id is and where to cancel it.
        status, own = await asyncio.to_thread(
            call, f"{live.url}/v1/responses/{task_id}/cancel", admin, "POST"
        )
        assert status == 404 and own["error"]["code"] == "response_not_found", own
        assert "the task of a download, not a response" in own["error"]["message"]
        assert f"POST /v1/tasks/{task_id}/cancel" in own["error"]["message"]

        # The command with that client's token: the same words, and why (its token).
        monkeypatch.setenv("LMSP_TOKEN", other)
        shown = await asyncio.to_thread(lmsp, "tasks", "cancel", task_id, data_dir=live.data_dir)
        assert shown.returncode == 2, shown
        assert f"{task_id}: No task with id '{task_id}' for this client" in shown.stderr
        assert "No response" not in shown.stderr
        assert "LMSP_TOKEN is the token of the client laptop" in shown.stderr
        monkeypatch.delenv("LMSP_TOKEN")

        current = await asyncio.to_thread(task_object_of, live, admin, task_id)
        assert current["state"] in ("running", "completed"), current  # not cancelled by them
        status, _ = await asyncio.to_thread(
            call, f"{live.url}/v1/tasks/{task_id}/cancel", admin, "POST"
        )
        assert status == 200
    finally:
        await asyncio.to_thread(live.stop)
