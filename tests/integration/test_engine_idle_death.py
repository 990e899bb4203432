"""A loaded model's engine worker killed while idle (the out-of-memory killer picks the
biggest idle process): the real worker, the real demo model, a real SIGKILL. The model
shows unloaded at once (not "loaded" with a dead engine_pid), the crash is on record, and
the next request loads it again and completes; it never fails on the dead process. Idle
deaths do not hold the model (two task crashes within 10 minutes do)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.serve_process import call
from tests.integration.service_fixtures import ALL_SCOPES, MODEL, LiveCore
from tests.support.polling import until_sync


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveCore]:
    core = LiveCore(tmp_path / "data")
    try:
        yield core
    finally:
        core.stop()


def entry(live: LiveCore, token: str) -> dict[str, Any]:
    status, body = call(f"{live.url}/v1/models/{MODEL}", token)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def kill_idle_worker(live: LiveCore, token: str) -> int:
    """SIGKILL the loaded model's idle worker; wait until /v1/models stops calling it loaded."""
    pid = entry(live, token)["engine_pid"]
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)
    shown = until_sync(
        lambda: (e := entry(live, token))["state"] != "loaded" and e,
        60,
        "the dead engine's model to show as not loaded",
    )
    assert shown["state"] == "unloaded", shown  # nothing loads it by itself
    assert "engine_pid" not in shown, shown
    assert shown["engine_crash"]["signal"] == "SIGKILL"
    assert shown["engine_crash"]["tasks"] == {}  # no task was running on it
    assert shown["engine_crash"]["held"] is False
    status, ps = call(f"{live.url}/api/ps", token)
    assert status == 200 and ps["models"] == [], ps
    return pid  # type: ignore[no-any-return]


def test_an_engine_killed_while_idle_is_unloaded_and_the_next_request_loads_it(
    live: LiveCore,
) -> None:
    token = live.token(*ALL_SCOPES)
    # A task whose policy is `fail`: today's code failed it with engine_crashed, a crash
    # "while this task was unfinished" that came before the task existed.
    body = {"model": MODEL, "input": "Say hi.", "max_output_tokens": 4, "on_restart": "fail"}
    # Loaded as the Models page's Load does (which also releases a held model).
    status, loaded = call(f"{live.url}/v1/models/{MODEL}/load", token, "POST")
    assert status == 200 and loaded["state"] == "loaded", loaded
    first_pid = kill_idle_worker(live, token)
    status, answer = call(f"{live.url}/v1/responses", token, "POST", body)
    assert status == 200 and answer["status"] in ("completed", "incomplete"), answer
    assert answer["output_text"], answer
    loaded = entry(live, token)
    assert loaded["state"] == "loaded" and loaded["engine_pid"] != first_pid, loaded

    # A second idle death within 10 minutes (of the copy that request loaded, with no Load
    # between to release it) does not hold the model: no task caused either.
    kill_idle_worker(live, token)
    status, answer = call(f"{live.url}/v1/responses", token, "POST", body)
    assert status == 200 and answer["status"] in ("completed", "incomplete"), answer
    assert entry(live, token)["engine_crash"]["held"] is False
