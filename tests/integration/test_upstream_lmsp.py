"""A second LMSP service as the upstream of the first (a laptop using a workstation): the
first lists the second's models, runs tasks there over Responses, and its cancel stops the
second's task through the stream close and the cancel route."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.support.polling import until_sync

LOCAL = "smollm2-135m-instruct"
MODEL = f"ws/{LOCAL}"
KEY_VAR = "LMSP_TEST_WORKSTATION_TOKEN"


def wait_for(check: Any, what: str, limit: float = 180.0) -> Any:
    return until_sync(check, limit, what, 0.05)


def task_of(url: str, token: str, task_id: str) -> Any:
    status, task = call(f"{url}/v1/tasks/{task_id}", token)
    assert status == 200, task
    return task


def finished(task: Any) -> bool:
    return task["state"] in ("completed", "incomplete", "failed", "cancelled")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("two-services")
    workstation = ServeProcess(root / "workstation")
    laptop = ServeProcess(root / "laptop")
    ws_url = workstation.start()
    ws_token = create_token(workstation.data_dir, "models:read,responses:read,responses:write")
    ws_admin = create_token(workstation.data_dir)
    laptop.start()
    laptop_token = create_token(laptop.data_dir)
    added = subprocess.run(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(laptop.data_dir),
         "upstream", "add", "ws", ws_url, "--api-key-env", KEY_VAR],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, KEY_VAR: ws_token},
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    try:
        yield {
            "ws": workstation,
            "ws_token": ws_token,
            "ws_admin": ws_admin,
            "laptop": laptop,
            "token": laptop_token,
        }
    finally:
        laptop.terminate()
        workstation.terminate()


def listed(pair: dict[str, Any]) -> Any:
    def check() -> Any:
        _, page = call(f"{pair['laptop'].url}/v1/models", pair["token"])
        ready = [m for m in page["data"] if m["id"] == MODEL and m["upstream"]["reachable"]]
        return ready[0] if ready else None

    return wait_for(check, f"{MODEL} in the laptop's models")


def test_the_workstations_models_are_listed_on_the_laptop(pair: dict[str, Any]) -> None:
    model = listed(pair)
    assert model["owned_by"] == "ws"
    listing = subprocess.run(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(pair["laptop"].data_dir),
         "upstream", "list", "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    [status] = json.loads(listing.stdout)
    assert status["kind"] == "lmsp" and LOCAL in status["models"]
    assert pair["ws_token"] not in listing.stdout


def test_a_task_on_the_laptop_runs_on_the_workstation(pair: dict[str, Any]) -> None:
    listed(pair)
    laptop, token = pair["laptop"], pair["token"]
    body = {"model": MODEL, "input": "Say hello.", "max_output_tokens": 16, "temperature": 0}
    status, response = call(f"{laptop.url}/v1/responses", token, "POST", body)
    assert status == 200, response
    assert response["status"] in ("completed", "incomplete") and response["output_text"]
    # The workstation ran it as a task of its own, with the same text.
    _, tasks = call(f"{pair['ws'].url}/v1/tasks?limit=5", pair["ws_admin"])
    [remote] = [t for t in tasks["data"] if t["model"] == LOCAL]
    _, remote_response = call(f"{pair['ws'].url}/v1/responses/{remote['id']}", pair["ws_admin"])
    assert remote_response["output_text"] == response["output_text"]


def test_cancel_on_the_laptop_cancels_the_workstations_task(pair: dict[str, Any]) -> None:
    listed(pair)
    laptop, token = pair["laptop"], pair["token"]
    body = {
        "model": MODEL,
        "input": "Write a very long story about a dragon who learns to bake bread.",
        "max_output_tokens": 400,
        "temperature": 0,
        "background": True,
    }
    status, created = call(f"{laptop.url}/v1/responses", token, "POST", body)
    assert status == 202, created
    task_id = created["id"]
    wait_for(
        lambda: (t := task_of(laptop.url, token, task_id))["output_tokens"] >= 3 or finished(t),
        "output on the laptop",
    )
    status, _ = call(f"{laptop.url}/v1/responses/{task_id}/cancel", token, "POST")
    assert status == 200
    task = wait_for(
        lambda: t if finished(t := task_of(laptop.url, token, task_id)) else None, "cancel"
    )
    assert task["state"] == "cancelled"

    def remote_cancelled() -> Any:
        _, tasks = call(f"{pair['ws'].url}/v1/tasks?limit=1", pair["ws_admin"])
        newest = tasks["data"][0]
        return newest if newest["state"] == "cancelled" else None

    remote = wait_for(remote_cancelled, "the workstation's task to be cancelled", 60)
    assert remote["output_tokens"] < 400


def test_ws_token_is_not_in_the_laptops_log(pair: dict[str, Any]) -> None:
    log = (Path(pair["laptop"].data_dir) / "logs" / "lmsp-desktop.log").read_text()
    assert "upstream ws is reachable" in log
    assert pair["ws_token"] not in log and pair["ws_token"] not in pair["laptop"].stderr()
