"""A model's engine worker process, really killed mid-generation (SIGKILL, SIGSEGV,
SIGABRT), while a second model keeps streaming (the demo cut to 4 blocks, tests/support/
cut_model.py: a real llama.cpp model in a worker of its own, at a fifth of the CPU): the
service stays up, the other model's task goes on to the end, and the killed model's task
gets its restart policy, as after a restart of the service: `resume` ends byte-identical
to an uninterrupted run, `retry` starts over (and ends with the same greedy text), `fail`
fails with engine_crashed naming the signal. /v1/models shows the crash."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.worker import WorkerEngine
from tests.integration.serve_process import call
from tests.integration.service_fixtures import ALL_SCOPES, MODEL, LiveCore, task_object_of
from tests.support.cut_model import cut_demo_model
from tests.support.polling import until_sync

PROMPT = "Write a short story about a lighthouse keeper and a storm."
MAX_TOKENS = 80
VICTIM: dict[str, Any] = {
    "model": MODEL,
    "input": PROMPT,
    "max_output_tokens": MAX_TOKENS,
    "temperature": 0.7,
    "seed": 4242,
}
TERMINAL = ("completed", "incomplete", "failed", "cancelled")


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveCore, str, str]]:
    folder = tmp_path_factory.mktemp("second-model")
    shutil.copyfile(cut_demo_model(), folder / "Other-Cut-135M.Q4_1.gguf")
    live = LiveCore(tmp_path_factory.mktemp("crash-core"), model_dirs=[folder])
    settings = dataclasses.replace(live.core.settings, max_loaded_models=2, parallel_per_model=2)
    live.core.apply_settings(settings)
    token = live.token(*ALL_SCOPES)

    def listed() -> list[str]:
        _status, body = call(f"{live.url}/v1/models", token)
        return [m["id"] for m in body["data"] if m["owned_by"] == "local"]

    ids = until_sync(lambda: len(listed()) >= 2 and listed(), 60, "both models to be listed")
    other = next(i for i in ids if i != MODEL)
    # Loaded before the tests: a neighbour started right before a kill is streaming at once.
    status, answer = call(
        f"{live.url}/v1/responses",
        token,
        "POST",
        {"model": other, "input": "Hi", "max_output_tokens": 1},
    )
    assert status == 200, answer
    try:
        yield live, token, other
    finally:
        live.stop()


@pytest.fixture(scope="module")
def reference(two_models: tuple[LiveCore, str, str]) -> dict[str, Any]:
    """The victim's uninterrupted run, the same for every signal and policy: run once."""
    live, token, _other = two_models
    status, answer = call(f"{live.url}/v1/responses", token, "POST", VICTIM)
    assert status == 200, answer
    return answer  # type: ignore[no-any-return]


def wait_for(live: LiveCore, token: str, task_id: str, predicate: Any, what: str) -> Any:
    seen: list[Any] = [None]

    def reached() -> Any:
        seen[0] = task_object_of(live, token, task_id)
        return seen[0] if predicate(seen[0]) else None

    return until_sync(reached, 180, lambda: f"{what}: {seen[0]}", 0.01)


def model_entry(live: LiveCore, token: str, model: str) -> dict[str, Any]:
    status, body = call(f"{live.url}/v1/models/{model}", token)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def background(live: LiveCore, token: str, body: dict[str, Any]) -> str:
    status, created = call(f"{live.url}/v1/responses", token, "POST", {**body, "background": True})
    assert status == 202, created
    return created["id"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("sig", "policy"),
    [(signal.SIGKILL, "resume"), (signal.SIGSEGV, "retry"), (signal.SIGABRT, "fail")],
    ids=["sigkill-resume", "sigsegv-retry", "sigabrt-fail"],
)
def test_a_killed_worker_costs_only_its_own_tasks(
    two_models: tuple[LiveCore, str, str],
    reference: dict[str, Any],
    sig: signal.Signals,
    policy: str,
) -> None:
    live, token, other = two_models
    expected = reference["output_text"]

    victim = background(live, token, {**VICTIM, "on_restart": policy})
    wait_for(live, token, victim, lambda t: t["output_tokens"] >= 8, "the victim to be going")
    pid = model_entry(live, token, MODEL)["engine_pid"]
    assert pid != os.getpid()
    # The victim's worker is frozen (SIGSTOP) while the neighbour starts: on a busy machine
    # the victim had sometimes written all its tokens before the neighbour's first one, and
    # ended 'incomplete' before the kill.
    os.kill(pid, signal.SIGSTOP)
    # The other model streams a long answer across the kill. Started only now, right before
    # the kill: the cut model writes its 160 tokens five times as fast as the victim's, so a
    # neighbour started first had sometimes finished before the kill on a busy machine, and
    # then proved nothing ('160 > 160').
    neighbour = background(
        live,
        token,
        {"model": other, "input": "Write a long essay about bread.", "max_output_tokens": 160},
    )
    wait_for(live, token, neighbour, lambda t: t["output_tokens"] >= 1, "the neighbour to go")
    other_before = task_object_of(live, token, neighbour)["output_tokens"]
    assert task_object_of(live, token, victim)["state"] == "running"
    os.kill(pid, sig)  # a stopped process takes SIGKILL at once, the others when continued
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)

    ended = wait_for(live, token, victim, lambda t: t["state"] in TERMINAL, "the victim to end")
    status, events_page = call(f"{live.url}/v1/tasks/{victim}/events?limit=1000", token)
    types = [e["type"] for e in events_page["data"]]
    status, response = call(f"{live.url}/v1/responses/{victim}", token)
    if policy == "fail":
        assert ended["state"] == "failed"
        assert response["error"]["code"] == "engine_crashed"
        assert sig.name in response["error"]["message"]
    else:
        assert ended["state"] == reference["status"], ended  # incomplete: max tokens
        assert response["output_text"] == expected
        assert ("response.resumed" if policy == "resume" else "response.queued") in types
    crash = model_entry(live, token, MODEL)["engine_crash"]
    assert crash["signal"] == sig.name
    outcome = {"resume": "resumed", "retry": "requeued", "fail": "failed"}[policy]
    assert crash["tasks"] == {outcome: 1}

    # The other model never stopped: it went on past where it was and finished.
    finished = wait_for(
        live, token, neighbour, lambda t: t["state"] in TERMINAL, "the neighbour to end"
    )
    assert finished["state"] in ("completed", "incomplete"), finished
    assert finished["output_tokens"] > other_before
    assert "engine_crash" not in model_entry(live, token, other)
    status, health = call(f"{live.url}/v1/health", token)
    assert status == 200 and health["status"] == "ok"
    # A crash resets after the user loads the model again (two within 10 minutes hold it).
    live.call(live.core.runner.load_again(MODEL), timeout=120)


def test_a_worker_out_of_memory_fails_its_task_clearly(tmp_path: Path) -> None:
    """Workers capped at 450 MiB of address space (RLIMIT_AS): llama.cpp's allocation of the
    KV cache fails inside the worker; the task fails with a message saying what to lower,
    and the service goes on answering."""
    live = LiveCore(tmp_path / "data", engine=WorkerEngine(memory_limit=450 * 2**20, n_threads=1))
    try:
        token = live.token(*ALL_SCOPES)
        body = {"model": MODEL, "input": "Hello", "max_output_tokens": 4}
        status, answer = call(f"{live.url}/v1/responses", token, "POST", body)
        assert status >= 400, answer
        assert answer["error"]["code"] == "model_load_failed"
        assert "context length" in answer["error"]["message"]
        assert "engine_pid" not in model_entry(live, token, MODEL)  # nothing left loaded
        status, health = call(f"{live.url}/v1/health", token)
        assert status == 200 and health["status"] == "ok"
    finally:
        live.stop()


def test_a_model_file_cut_under_its_worker_says_so(tmp_path: Path) -> None:
    """The file of a loaded model cut on disk mid-generation: llama.cpp, which maps it into
    memory, faults (SIGBUS) in the worker; the task fails saying the file was cut or
    replaced (not a bare SIGBUS), and the next task of it is refused as changed."""
    folder = tmp_path / "models"
    folder.mkdir()
    model_file = folder / "Cut-Under-Worker.Q4_1.gguf"
    shutil.copyfile(cut_demo_model(), model_file)
    live = LiveCore(tmp_path / "data", model_dirs=[folder])
    try:
        token = live.token(*ALL_SCOPES)

        def listed() -> str | None:
            _status, body = call(f"{live.url}/v1/models", token)
            ids = [m["id"] for m in body["data"] if m["id"].startswith("cut-under-worker")]
            return ids[0] if ids else None

        model = until_sync(listed, 60, "the model to be listed")
        body = {"model": model, "input": PROMPT, "max_output_tokens": 4000, "on_restart": "fail"}
        victim = background(live, token, body)
        wait_for(live, token, victim, lambda t: t["output_tokens"] >= 4, "the victim to be going")
        os.truncate(model_file, model_file.stat().st_size // 3)

        ended = wait_for(live, token, victim, lambda t: t["state"] in TERMINAL, "the victim to end")
        assert ended["state"] == "failed", ended
        _status, response = call(f"{live.url}/v1/responses/{victim}", token)
        assert response["error"]["code"] == "engine_crashed", response["error"]
        assert "SIGBUS" in response["error"]["message"]
        assert "model file was cut or replaced" in response["error"]["message"]

        again = background(live, token, {**body, "max_output_tokens": 4})
        wait_for(live, token, again, lambda t: t["state"] in TERMINAL, "the next to end")
        _status, response = call(f"{live.url}/v1/responses/{again}", token)
        assert response["error"]["code"] == "model_changed", response["error"]
    finally:
        live.stop()
