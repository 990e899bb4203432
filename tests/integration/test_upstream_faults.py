"""Upstream faults through a real `serve`: the upstream killed mid-stream (a real
llama_cpp.server, SIGKILL), answering 500, never answering. Each ends the task `failed`
with `upstream_unavailable` and the upstream's own words after the retries; nothing hangs."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.serve_process import ServeProcess, call, create_token, lmsp
from tests.integration.upstream_servers import LlamaServer
from tests.support.fake_upstream import Behaviour, FakeUpstream
from tests.support.polling import until_sync


class ThreadedFake:
    """A FakeUpstream on its own loop in a daemon thread, for a `serve` subprocess to use."""

    def __init__(self, script: list[Behaviour]) -> None:
        self.fake = FakeUpstream(script)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self.fake.start(), self.loop).result(10)

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.fake.stop(), self.loop).result(10)
            asyncio.run_coroutine_threadsafe(_abort_the_rest(), self.loop).result(10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()  # else its self-pipe sockets leak (a ResourceWarning)


async def _abort_the_rest() -> None:
    """On the fake's own loop, once it has stopped: abort every transport the loop still
    holds. A connection accepted while the loop was starved (beside a CPU hog) can get its
    transport only after FakeUpstream.stop looked at the server's connections, and then
    leaks when the loop closes (ResourceWarning: unclosed transport, failing the test; seen
    in the thirteenth session's hog run). The loop is this fake's alone."""
    loop = asyncio.get_running_loop()
    # A few rounds, a few ms apart: a connection accepted just before the server closed
    # gets its transport from a task of its own, which may run after a first look (the
    # fresh-clone CI of the fifteenth session: `unclosed transport` once, under load).
    # Until no socket is left open and no other task (an accept's) is pending, not a fixed
    # number of rounds: 20 rounds of 5 ms still leaked one under the nineteenth session's CI
    # (test_upstream_answering_500, `unclosed transport`), the thread starved by its load.
    deadline = loop.time() + 10
    while True:
        # Closing ones too: a transport closed with unsent bytes (the 504 a `silent` step
        # answers after its client gave up) waits for its buffer to drain before it closes
        # the socket, and at the loop's close leaks it (an `unclosed socket` at this test's
        # teardown, the eighteenth session's third CI). abort() drops the buffer at once.
        open_ones = [
            t
            for t in list(getattr(loop, "_transports", {}).values())
            if t is not None and getattr(t, "_sock", None) is not None  # None once closed
        ]
        for transport in open_ones:
            transport.abort()
        others = asyncio.all_tasks() - {asyncio.current_task()}
        # Never right after aborting some: their connection_lost, which closes the socket,
        # runs on a later turn (the deadline passing there leaked one under the twentieth
        # session's CI: `unclosed transport` at test_upstream_answering_500's teardown).
        if not open_ones and (not others or loop.time() > deadline):
            return
        if loop.time() > deadline + 20:  # not to hang the run: the leak then fails the test
            return
        await asyncio.sleep(0.005)  # their connection_lost closes the sockets


# `serve` runs with the service's pause between an upstream's tries (BACKOFF_S: 1, 2 and 4 s,
# core/upstreams/engine.py) at 10 ms: these tests count the tries and read how the task ends,
# never how long the pauses were, and the 7 s each retrying test slept was most of its time
# (the unit tests of the retries shorten it the same way, in process). Otherwise it is
# `python -m lmsp_desktop ... serve` as users start it.
SERVE_WITH_QUICK_RETRIES = """
import runpy
import lmsp_desktop.core.upstreams.engine
lmsp_desktop.core.upstreams.engine.BACKOFF_S = 0.01
runpy.run_module("lmsp_desktop", run_name="__main__", alter_sys=True)
"""


def quick_retries(popen: Any) -> Any:
    """subprocess.Popen, but a `python -m lmsp_desktop ... serve` runs as above."""

    def started(command: list[str], *args: Any, **kwargs: Any) -> Any:
        if command[1:3] == ["-m", "lmsp_desktop"] and "serve" in command:
            command = [command[0], "-c", SERVE_WITH_QUICK_RETRIES, *command[3:]]
        return popen(command, *args, **kwargs)

    return started


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ServeProcess, str]]:
    monkeypatch.setattr(subprocess, "Popen", quick_retries(subprocess.Popen))
    server = ServeProcess(tmp_path / "data")
    server.start()
    try:
        yield server, create_token(server.data_dir)
    finally:
        server.terminate()


def add(server: ServeProcess, url: str, *extra: str) -> None:
    done = lmsp("upstream", "add", "gpu", url, *extra, data_dir=server.data_dir)
    assert done.returncode == 0, done.stderr


def wait_model(server: ServeProcess, token: str, model: str, reachable: bool) -> dict[str, Any]:
    seen: list[Any] = [None]

    def listed() -> dict[str, Any] | None:
        _, seen[0] = call(f"{server.url}/v1/models", token)
        found = [m for m in seen[0]["data"] if m["id"] == model]
        return found[0] if found and found[0]["upstream"]["reachable"] is reachable else None

    return until_sync(listed, 60, lambda: f"{model} reachable={reachable}: {seen[0]}", 0.1)


def finished(task: dict[str, Any]) -> bool:
    return task["state"] in ("completed", "incomplete", "failed", "cancelled")


def wait_task(
    server: ServeProcess, token: str, task_id: str, predicate: Any, limit: float
) -> dict[str, Any]:
    seen: list[Any] = [None]

    def reached() -> dict[str, Any] | None:
        _, seen[0] = call(f"{server.url}/v1/tasks/{task_id}", token)
        return seen[0] if predicate(seen[0]) else None

    return until_sync(reached, limit, lambda: f"task {task_id} to get there: {seen[0]}", 0.05)


def run_until_finished(server: ServeProcess, token: str, body: dict[str, Any]) -> dict[str, Any]:
    status, created = call(
        f"{server.url}/v1/responses", token, "POST", {**body, "background": True}
    )
    assert status == 202, created
    return wait_task(server, token, created["id"], finished, 120)


def test_upstream_killed_mid_stream(service: Any, tmp_path: Path) -> None:
    server, token = service
    upstream = LlamaServer(tmp_path / "llama.log")
    upstream.start()
    try:
        add(server, upstream.url)
        wait_model(server, token, "gpu/smol", reachable=True)
        body = {
            "model": "gpu/smol",
            "input": "Write a very long story about a dragon who learns to bake bread.",
            "max_output_tokens": 400,
            "temperature": 0,
            "background": True,
        }
        status, created = call(f"{server.url}/v1/responses", token, "POST", body)
        assert status == 202

        def generating(task: dict[str, Any]) -> bool:
            assert task["state"] in ("queued", "running"), task
            return bool(task["output_tokens"] >= 3)

        wait_task(server, token, created["id"], generating, 120)
        upstream.kill()
        task = wait_task(server, token, created["id"], finished, 180)
    finally:
        upstream.kill()
    assert task["state"] == "failed" and task["error"]["code"] == "upstream_unavailable"
    assert task["error"]["message"].startswith("Upstream gpu:")
    _, response = call(f"{server.url}/v1/responses/{created['id']}", token)
    assert response["output_text"]  # the partial output is kept
    # The models list (and so the app's Models page) shows the upstream down.
    down = wait_model(server, token, "gpu/smol", reachable=False)
    assert down["state"] == "unloaded" and down["upstream"]["error"]


def test_upstream_answering_500(service: Any) -> None:
    server, token = service
    fake = ThreadedFake([Behaviour("error", status=500, message="CUDA out of memory")] * 10)
    try:
        add(server, fake.url)
        wait_model(server, token, "gpu/m1", reachable=True)
        task = run_until_finished(server, token, {"model": "gpu/m1", "input": "hi"})
    finally:
        fake.stop()
    assert task["state"] == "failed" and task["error"]["code"] == "upstream_unavailable"
    assert "HTTP 500: CUDA out of memory" in task["error"]["message"]
    assert len(fake.fake.requests) == 4  # tried, then retried with backoff three times


def test_upstream_never_answering(service: Any) -> None:
    server, token = service
    fake = ThreadedFake([Behaviour("silent")] * 10)
    try:
        add(server, fake.url, "--timeout", "1")
        wait_model(server, token, "gpu/m1", reachable=True)
        task = run_until_finished(server, token, {"model": "gpu/m1", "input": "hi"})
    finally:
        fake.stop()
    assert task["state"] == "failed" and task["error"]["code"] == "upstream_unavailable"
    assert "no answer within" in task["error"]["message"]
