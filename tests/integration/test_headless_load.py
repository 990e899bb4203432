"""Loading and unloading a model without the window, against a real service and the real demo
model: Ollama's idioms (a generate without a prompt, a chat without messages, `keep_alive` 0:
`ollama stop`) with the official `ollama` client, POST /v1/models/{id}/load|unload, and
`lmsp-desktop models load|unload` as a process beside it; a model held after two real engine
crashes is loaded again headless, and the held-model error names how."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ollama import Client

from tests.integration.serve_process import call, lmsp
from tests.integration.service_fixtures import (
    ALL_SCOPES,
    MODEL,
    USER_SCOPES,
    LiveCore,
    cli_beside,
    task_object_of,
)
from tests.support.polling import until_sync

TAGGED = f"{MODEL}:latest"
TERMINAL = ("completed", "incomplete", "failed", "cancelled")
LONG = {"model": MODEL, "input": "Write a long story about bread.", "max_output_tokens": 400}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCore]:
    running = LiveCore(tmp_path_factory.mktemp("headless-load"))
    try:
        yield running
    finally:
        running.stop()


def state(live: LiveCore, token: str) -> str:
    status, body = call(f"{live.url}/v1/models/{MODEL}", token)
    assert status == 200, body
    return str(body["state"])


def generating(live: LiveCore, token: str, body: dict[str, Any]) -> str:
    """A background task of `body`, once it has written a token."""
    status, created = call(f"{live.url}/v1/responses", token, "POST", {**body, "background": True})
    assert status == 202, created
    until_sync(
        lambda: task_object_of(live, token, created["id"])["output_tokens"] >= 1,
        180,
        "a token written",
    )
    return str(created["id"])


def test_ollama_loads_and_unloads_without_a_prompt(live: LiveCore) -> None:
    token = live.token(*USER_SCOPES)
    ollama = Client(host=live.url, headers={"Authorization": f"Bearer {token}"}, timeout=120)

    def running() -> list[str]:
        return [str(m.model) for m in ollama.ps().models]

    loaded = ollama.generate(MODEL)  # no prompt: load
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""
    assert TAGGED in running() and state(live, token) == "loaded"
    unloaded = ollama.generate(MODEL, keep_alive=0)  # what `ollama stop` sends
    assert unloaded.done and unloaded.done_reason == "unload"
    assert running() == [] and state(live, token) == "unloaded"

    chat = ollama.chat(TAGGED, messages=[], keep_alive=-1)  # load, kept until unloaded
    assert chat.done and chat.done_reason == "load" and chat.message.content == ""
    [kept] = [m for m in ollama.ps().models if m.model == TAGGED]
    assert kept.expires_at and kept.expires_at.year > 2100  # never, as Ollama shows it
    chat = ollama.chat(TAGGED, messages=[], keep_alive=0)
    assert chat.done_reason == "unload" and running() == []
    # A prompt still generates: the load idiom is only the empty request.
    answer = ollama.generate(MODEL, "Say hi.", options={"num_predict": 4, "temperature": 0})
    assert answer.done and answer.response and answer.eval_count
    ollama._client.close()


def test_load_and_unload_routes_and_commands(live: LiveCore) -> None:
    user = live.token(*USER_SCOPES)
    admin = live.token(*ALL_SCOPES)
    status, body = call(f"{live.url}/v1/models/{MODEL}/load", user, "POST")
    assert status == 403, body  # admin scope, as verify and rescan
    status, body = call(f"{live.url}/v1/models/{MODEL}/load", admin, "POST")
    assert status == 200 and body["state"] == "loaded", body
    status, body = call(f"{live.url}/v1/models/{MODEL}/unload", admin, "POST")
    assert status == 200 and body["state"] == "unloaded" and not body["unload_pending"], body

    done = cli_beside(live, "models", "load", MODEL)
    assert done.returncode == 0, done.stderr
    assert f"{MODEL} is loaded" in done.stdout and state(live, admin) == "loaded"
    done = cli_beside(live, "models", "unload", MODEL)
    assert done.returncode == 0, done.stderr
    assert f"{MODEL} is unloaded." in done.stdout and state(live, admin) == "unloaded"
    done = cli_beside(live, "models", "load", "no-such-model")
    assert done.returncode == 2 and "no-such-model" in done.stderr

    # A task running on it is not cut short: the model unloads when it ends.
    running = generating(live, admin, LONG)
    status, body = call(f"{live.url}/v1/models/{MODEL}/unload", admin, "POST")
    assert status == 200 and body["unload_pending"] and body["state"] == "loaded", body
    assert task_object_of(live, admin, running)["state"] == "running"
    call(f"{live.url}/v1/responses/{running}/cancel", admin, "POST")
    until_sync(lambda: state(live, admin) == "unloaded", 60, "the unload after the task")


def test_a_model_held_after_two_crashes_loads_again_headless(live: LiveCore) -> None:
    token = live.token(*ALL_SCOPES)
    for _ in range(2):  # two real engine crashes within ten minutes hold the model
        victim = generating(live, token, {**LONG, "on_restart": "fail"})
        pid = live.core.runner.engine_pid(MODEL)
        assert pid is not None and pid != os.getpid()
        os.kill(pid, signal.SIGKILL)
        until_sync(
            lambda v=victim: task_object_of(live, token, v)["state"] in TERMINAL, 60, "the crash"
        )
    status, body = call(f"{live.url}/v1/models/{MODEL}", token)
    assert body["engine_crash"]["held"], body

    short = {"model": MODEL, "input": "Say hi.", "max_output_tokens": 4}
    status, refused = call(f"{live.url}/v1/responses", token, "POST", short)
    assert status >= 400, refused
    message = refused["error"]["message"]
    assert f"lmsp-desktop models load {MODEL}" in message, message
    assert f"POST /v1/models/{MODEL}/load" in message, message

    done = cli_beside(live, "models", "load", MODEL)
    assert done.returncode == 0, done.stderr
    assert state(live, token) == "loaded"
    status, body = call(f"{live.url}/v1/models/{MODEL}", token)
    assert "engine_crash" not in body or not body["engine_crash"]["held"], body
    status, answer = call(f"{live.url}/v1/responses", token, "POST", short)
    assert status == 200 and answer["status"] in ("completed", "incomplete"), answer


def test_load_needs_a_running_service(tmp_path: Path) -> None:
    lmsp("token", "create", "--name", "x", data_dir=tmp_path)  # a data directory, no service
    done = lmsp("models", "load", MODEL, data_dir=tmp_path)
    assert done.returncode == 2 and "No service runs" in done.stderr
