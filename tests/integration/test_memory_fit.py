"""Loads sized to the machine through a real `serve` with the real llama.cpp engine: a model
declaring a 128k context loads with default settings and answers; a load that cannot fit is
refused with 507 before anything is allocated; `models set` applies at the next load."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lmsp_desktop.core.engines.fake import FakeEngine
from lmsp_desktop.core.models import machine
from tests.integration.serve_process import ServeProcess, call, create_token, lmsp
from tests.support.fake_core import MODEL, running_core, session, token
from tests.support.long_context_model import copy_long_context_demo_model

LONG = "long-context"
DEMO = "smollm2-135m-instruct"
GIB = 1 << 30


def rss(pid: int) -> int:
    """Resident memory of the service and its children (each model's engine worker)."""
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        for line in Path(f"/proc/{current}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
        # A child started from another thread is listed under that thread's task.
        for task in Path(f"/proc/{current}/task").iterdir():
            todo.extend(int(child) for child in (task / "children").read_text().split())
    return total


@pytest.fixture(scope="module")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the demo model declaring a 131,072-token trained context."""
    folder = tmp_path_factory.mktemp("long-models")
    copy_long_context_demo_model(folder / f"{LONG}.gguf", 131_072)
    return folder


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for process in started:
        if process.proc is not None and process.proc.poll() is None:
            process.terminate()


def start(serve: list[ServeProcess], data: Path, *extra: str) -> tuple[ServeProcess, str]:
    data.mkdir(exist_ok=True)
    token = create_token(data)
    process = ServeProcess(data, *extra)
    serve.append(process)
    process.start()
    return process, token


def ask(url: str, token: str, model: str, text: str = "Say hello.") -> tuple[int, dict]:
    body = {"model": model, "input": text, "max_output_tokens": 8, "temperature": 0}
    return call(f"{url}/v1/responses", token, "POST", body)


def test_a_128k_model_loads_with_defaults_and_answers(
    tmp_path: Path, long_model: Path, serve: list[ServeProcess]
) -> None:
    process, token = start(serve, tmp_path / "data", "--models-dir", str(long_model))
    status, listed = call(f"{process.url}/v1/models/{LONG}", token)
    assert status == 200, listed
    # Before loading: the context it will run with, the trained one and what it will take.
    assert listed["trained_context_length"] == 131_072
    assert listed["context_length"] == 8192
    estimate = listed["memory_estimate"]
    # 4 sequences x 8192 tokens (1.28 GiB once its two contexts fill), not 4 x 128k (the
    # embedding context a first embedding would open is checked then, not counted here)
    assert 1.1 * GIB < estimate < 1.5 * GIB

    status, answer = ask(process.url, token, LONG)
    assert status == 200, answer
    assert answer["status"] in ("completed", "incomplete") and answer["output_text"]
    status, loaded = call(f"{process.url}/v1/models/{LONG}", token)
    assert loaded["state"] == "loaded" and loaded["context_length"] == 8192
    assert loaded["memory_estimate"] == estimate
    # The service and its engine worker really stayed small: far from the 12 GB of 4 x 128k
    # tokens of KV cache (the estimate leaves out the processes themselves: Python, aiohttp).
    assert process.proc is not None
    assert rss(process.proc.pid) < estimate + 0.5 * GIB


def test_a_load_that_cannot_fit_is_refused_with_507_and_allocates_nothing(
    tmp_path: Path, long_model: Path, serve: list[ServeProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    # This machine's memory, as the service reads it, made small (docs/memory.md).
    monkeypatch.setenv(machine.AVAILABLE_ENV, "200M")
    process, token = start(serve, tmp_path / "data", "--models-dir", str(long_model))
    assert process.proc is not None
    before = rss(process.proc.pid)
    status, refused = ask(process.url, token, LONG)
    assert status == 507, refused
    error = refused["error"]
    assert error["code"] == "insufficient_memory"
    assert "200 MiB available (LMSP_MEMORY_AVAILABLE=200M)" in error["message"]
    assert "Lower the context length or concurrent requests" in error["message"]
    # Nothing was stored, nothing was loaded, the memory did not move.
    status, tasks = call(f"{process.url}/v1/tasks", token)
    assert status == 200 and tasks["data"] == []
    status, listed = call(f"{process.url}/v1/models/{LONG}", token)
    assert listed["state"] == "unloaded"
    assert rss(process.proc.pid) < before + 64 * (1 << 20)


def test_models_set_round_trip_applies_at_the_next_load(
    tmp_path: Path, serve: list[ServeProcess]
) -> None:
    data = tmp_path / "data"
    process, token = start(serve, data)
    status, before = call(f"{process.url}/v1/models/{DEMO}", token)
    done = lmsp("models", "set", DEMO, "--context", "2048", "--parallel", "2", data_dir=data)
    assert done.returncode == 0, done.stderr
    assert "Applies at its next load" in done.stdout
    # Flags not given keep their value; q8_0 needs flash attention, which the engine turns
    # on; every layer "on the GPU" is a no-op for this CPU build but must not break the load.
    done = lmsp("models", "set", DEMO, "--kv-type", "q8_0", "--gpu-layers", "all", data_dir=data)
    assert done.returncode == 0, done.stderr
    listed = lmsp("models", "list", "--json", data_dir=data)
    row = next(r for r in json.loads(listed.stdout) if r["id"] == DEMO)
    assert row["settings"] == {
        "context": 2048,
        "parallel": 2,
        "kv_type": "q8_0",
        "gpu_layers": "all",
    }
    assert row["context_length"] == 2048
    # A quarter of the KV cells at half the bytes each; the compute part (512-row prompt
    # batches since prefill's rework) does not shrink with them.
    assert row["memory_estimate"] < before["memory_estimate"] / 2

    status, answer = ask(process.url, token, DEMO)
    assert status == 200, answer
    status, model = call(f"{process.url}/v1/models/{DEMO}", token)
    assert model["state"] == "loaded" and model["context_length"] == 2048
    # The context check before a task exists uses the context the model runs with now.
    status, refused = ask(process.url, token, DEMO, "lighthouse " * 2100)
    assert status == 400 and refused["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 2048 tokens" in refused["error"]["message"]


def test_max_context_flag_sets_every_models_context_for_its_run_only(
    tmp_path: Path, serve: list[ServeProcess]
) -> None:
    """`serve --max-context 2048` (as Ollama's OLLAMA_CONTEXT_LENGTH or llama-server's -c):
    the demo model runs with 2,048 tokens, its memory estimate shrinks with its KV cache,
    and the flag is never written to the stored settings."""
    data = tmp_path / "data"
    process, token = start(serve, data, "--max-context", "2048")
    status, model = call(f"{process.url}/v1/models/{DEMO}", token)
    assert status == 200 and model["context_length"] == 2048, model
    assert model["trained_context_length"] == 8192
    status, answer = ask(process.url, token, DEMO)
    assert status == 200 and answer["output_text"], answer
    status, model = call(f"{process.url}/v1/models/{DEMO}", token)
    assert model["state"] == "loaded" and model["context_length"] == 2048
    status, refused = ask(process.url, token, DEMO, "lighthouse " * 2100)
    assert status == 400 and refused["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 2048 tokens" in refused["error"]["message"]
    process.terminate()
    # Without the flag the stored settings apply: the default context, a larger estimate.
    listed = lmsp("models", "list", "--json", data_dir=data)
    row = next(r for r in json.loads(listed.stdout) if r["id"] == DEMO)
    assert row["context_length"] == 8192
    assert row["memory_estimate"] > model["memory_estimate"]


async def test_memory_taken_before_the_load_fails_the_task_with_507(tmp_path: Path) -> None:
    """The request fitted when it came; by its load the memory was gone: the task fails with
    insufficient_memory, the waiting client gets 507, the engine never loads. Real store,
    real HTTP; the scripted engine records loads."""
    engine = FakeEngine()
    async with running_core(tmp_path, engine) as core:
        readings = iter([GIB * 64] + [200 << 20] * 10)

        def shrinking() -> machine.HostMemory:
            return machine.HostMemory(64 * GIB, next(readings), "MemAvailable")

        core.fitter.memory = shrinking
        secret = await token(core, "responses:write", "responses:read")
        async with session(core, secret) as http:
            body = {"model": MODEL, "input": "Hi", "max_output_tokens": 4}
            async with http.post("/v1/responses", json=body) as answer:
                assert answer.status == 507, await answer.text()
                error = (await answer.json())["error"]
    assert error["code"] == "insufficient_memory"
    assert "200 MiB available (MemAvailable)" in error["message"]
    assert engine.load_count == 0
