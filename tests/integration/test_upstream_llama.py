"""llama-cpp-python's own OpenAI-compatible server as the upstream of a real `serve`:
models listed as gpu/smol, plain, streamed and background responses, idempotency, cancel
that stops the upstream, SIGKILL of this service mid-generation with `retry` and `resume`,
and the upstream's API key never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.serve_process import ServeProcess, call, create_token
from tests.integration.upstream_servers import LlamaServer
from tests.support.polling import until_sync

KEY = "sk-upstream-test-7f3a9c2e51"
KEY_VAR = "LMSP_TEST_UPSTREAM_KEY"
MODEL = "gpu/smol"
LONG = {
    "model": MODEL,
    "input": "Write a very long story about a dragon who learns to bake bread.",
    "max_output_tokens": 300,
    "temperature": 0,
}
SEEN: list[str] = []  # every API answer of this module, checked for the key at the end


def lmsp(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, KEY_VAR: KEY},
    )


def api(url: str, token: str, method: str = "GET", body: Any = None, **kw: Any) -> Any:
    status, answer = call(url, token, method, body, **kw)
    SEEN.append(json.dumps(answer))
    return status, answer


def wait_task(url: str, token: str, task_id: str, predicate: Any, limit: float = 180.0) -> Any:
    seen: list[Any] = [None]

    def reached() -> Any:
        status, seen[0] = api(f"{url}/v1/tasks/{task_id}", token)
        assert status == 200, seen[0]
        return seen[0] if predicate(seen[0]) else None

    return until_sync(reached, limit, lambda: f"task {task_id} to get there: {seen[0]}", 0.05)


def finished(task: Any) -> bool:
    return task["state"] in ("completed", "incomplete", "failed", "cancelled")


def events_of(url: str, token: str, task_id: str) -> list[dict[str, Any]]:
    status, page = api(f"{url}/v1/tasks/{task_id}/events?limit=1000", token)
    assert status == 200
    return page["data"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = LlamaServer(tmp_path_factory.mktemp("llama") / "server.log", api_key=KEY)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def register(data_dir: Path, upstream: LlamaServer) -> None:
    done = lmsp(data_dir, "upstream", "add", "gpu", upstream.url, "--api-key-env", KEY_VAR)
    assert done.returncode == 0, done.stderr
    SEEN.append(done.stdout + done.stderr)


def wait_listed(url: str, token: str) -> dict[str, Any]:
    seen: list[Any] = [None]

    def listed() -> dict[str, Any] | None:
        _status, seen[0] = api(f"{url}/v1/models", token)
        found = [m for m in seen[0]["data"] if m["id"] == MODEL and m["upstream"]["reachable"]]
        return found[0] if found else None

    return until_sync(listed, 60, lambda: f"{MODEL} to be listed: {seen[0]}", 0.2)


@pytest.fixture(scope="module")
def service(
    tmp_path_factory: pytest.TempPathFactory, upstream: LlamaServer
) -> Iterator[tuple[ServeProcess, str]]:
    data_dir = tmp_path_factory.mktemp("svc") / "data"
    server = ServeProcess(data_dir)
    url = server.start()
    token = create_token(data_dir)
    register(data_dir, upstream)  # while it runs: picked up without a restart
    wait_listed(url, token)
    try:
        yield server, token
    finally:
        server.terminate()


def test_upstream_models_are_listed_with_their_upstream(service: Any) -> None:
    server, token = service
    model = wait_listed(server.url, token)
    assert model["owned_by"] == "gpu" and model["state"] == "loaded"
    assert model["upstream"]["model_count"] == 1
    assert model["upstream"]["latency_ms"] > 0
    status, one = api(f"{server.url}/v1/models/{MODEL}", token)
    assert status == 200 and one["id"] == MODEL
    status, missing = api(f"{server.url}/v1/responses", token, "POST", {**LONG, "model": "gpu/x"})
    assert status == 404 and missing["error"]["code"] == "model_not_found"


def test_plain_response_runs_on_the_upstream(service: Any, upstream: LlamaServer) -> None:
    server, token = service
    before = upstream.log().count("POST /v1/chat/completions")
    body = {"model": MODEL, "input": "Say hello in French.", "max_output_tokens": 16}
    status, response = api(f"{server.url}/v1/responses", token, "POST", body)
    assert status == 200, response
    assert response["status"] in ("completed", "incomplete") and response["output_text"]
    assert response["model"] == MODEL
    assert upstream.log().count("POST /v1/chat/completions") == before + 1
    types = [e["type"] for e in events_of(server.url, token, response["id"])]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert "response.output_text.delta" in types
    assert types[-1] in ("response.completed", "response.incomplete")


def test_streamed_response(service: Any) -> None:
    server, token = service
    body = {"model": MODEL, "input": "Name three colours.", "max_output_tokens": 24, "stream": True}
    request = urllib.request.Request(
        f"{server.url}/v1/responses",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    events = []
    with urllib.request.urlopen(request, timeout=120) as response:
        for raw in response:
            line = raw.decode()
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    SEEN.extend(json.dumps(e) for e in events)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    final = events[-1]
    assert final["type"] in ("response.completed", "response.incomplete"), final
    assert deltas and deltas == final["response"]["output_text"]


def test_background_response_with_idempotency(service: Any) -> None:
    server, token = service
    body = {"model": MODEL, "input": "Count to five.", "max_output_tokens": 20, "background": True}
    status, first = api(
        f"{server.url}/v1/responses", token, "POST", body, headers={"Idempotency-Key": "k-up-1"}
    )
    assert status == 202 and first["status"] == "queued"
    status, again = api(
        f"{server.url}/v1/responses", token, "POST", body, headers={"Idempotency-Key": "k-up-1"}
    )
    assert status == 202 and again["id"] == first["id"]
    task = wait_task(server.url, token, first["id"], finished)
    assert task["state"] in ("completed", "incomplete") and task["output_tokens"] > 0
    status, tasks = api(f"{server.url}/v1/tasks?model={MODEL}", token)
    assert sum(t["id"] == first["id"] for t in tasks["data"]) == 1


def test_cancel_stops_the_upstream_generating(service: Any, upstream: LlamaServer) -> None:
    server, token = service
    disconnects = upstream.log().count("Disconnected from client")
    status, created = api(f"{server.url}/v1/responses", token, "POST", {**LONG, "background": True})
    assert status == 202
    wait_task(server.url, token, created["id"], lambda t: t["output_tokens"] >= 3 or finished(t))
    status, _cancelled = api(f"{server.url}/v1/responses/{created['id']}/cancel", token, "POST")
    assert status == 200
    task = wait_task(server.url, token, created["id"], finished)
    assert task["state"] == "cancelled"
    assert task["output_tokens"] < LONG["max_output_tokens"]
    # The upstream saw the stream close and stopped (llama_cpp.server logs the disconnect).
    until_sync(
        lambda: upstream.log().count("Disconnected from client") > disconnects,
        30,
        lambda: f"the upstream to see the disconnect: {upstream.log()[-2000:]}",
        0.1,
    )


@pytest.mark.parametrize("policy", ["retry", "resume"])
def test_kill_9_mid_generation_recovers_through_the_upstream(
    tmp_path: Path, upstream: LlamaServer, policy: str
) -> None:
    data_dir = tmp_path / "data"
    server = ServeProcess(data_dir)
    url = server.start()
    token = create_token(data_dir)
    register(data_dir, upstream)
    wait_listed(url, token)
    # Killed at 5 tokens: 120 leave the kill a wide margin, and the restarted generation
    # (read again from the start under retry, continued under resume) runs to its cap:
    # LONG's 300 cost the upstream's one thread ~2.5x the decoding for the same claim.
    body = {**LONG, "max_output_tokens": 120, "background": True, "on_restart": policy}
    status, created = api(f"{url}/v1/responses", token, "POST", body)
    assert status == 202
    task_id = created["id"]
    task = wait_task(url, token, task_id, lambda t: t["output_tokens"] >= 5 or finished(t))
    assert not finished(task), "the generation ended before the kill"
    status, partial = api(f"{url}/v1/responses/{task_id}", token)
    requests_before = upstream.log().count("POST /v1/chat/completions")
    server.kill()
    url = server.start()
    task = wait_task(url, token, task_id, finished)
    assert task["state"] in ("completed", "incomplete"), task
    assert task["restarts"] == 1
    assert upstream.log().count("POST /v1/chat/completions") > requests_before
    status, final = api(f"{url}/v1/responses/{task_id}", token)
    types = [e["type"] for e in events_of(url, token, task_id)]
    if policy == "resume":
        assert "response.resumed" in types
        # The text committed before the kill is kept and continued, never repeated.
        assert final["output_text"].startswith(partial["output_text"])
        assert len(final["output_text"]) > len(partial["output_text"])
    else:
        assert "response.queued" in types
        # Started over: one new item after the requeue, and text in it.
        after = types[types.index("response.queued") :]
        assert after.count("response.output_item.added") == 1 and final["output_text"]
    server.terminate()
    SEEN.append(server.stderr())
    SEEN.append((data_dir / "logs" / "lmsp-desktop.log").read_text())


def test_the_key_is_never_shown(service: Any, upstream: LlamaServer) -> None:
    server, _token = service
    # The key is really needed: the upstream refuses a request without it.
    request = urllib.request.Request(upstream.url + "/models")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    refused.value.close()  # the error holds the open response: close it, or its socket leaks
    for args in (["upstream", "list"], ["upstream", "list", "--json"]):
        done = lmsp(server.data_dir, *args)
        assert done.returncode == 0 and "gpu" in done.stdout, done.stderr
        SEEN.append(done.stdout + done.stderr)
    assert '"reachable": true' in SEEN[-1]
    SEEN.append(server.stderr())
    SEEN.append((server.data_dir / "logs" / "lmsp-desktop.log").read_text())
    assert len(SEEN) > 20
    leaks = [text[:200] for text in SEEN if KEY in text]
    assert not leaks
