"""Ollama's /api/ps and /api/show tell the context and memory a model really runs with, as
GET /v1/models does, through a real `serve` with the real engine and the demo model
declaring a 131,072-token trained context: 8,192 at first (the default's cap), 16,384 once
`models set --context 16384` applies at the next load; never the trained length, which
`model_info` keeps (as Ollama's does). Clients such as Continue size their prompts by
`num_ctx`: told 131k, they sent prompts the model refused at 8k."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ollama import Client

from tests.integration.serve_process import ServeProcess, call, create_token, lmsp
from tests.support.long_context_model import copy_long_context_demo_model
from tests.support.polling import until_sync

LONG = "long-context"
TRAINED = 131_072


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServeProcess, str, Path]]:
    """A `serve` over a folder holding the demo model declaring a 131,072-token context."""
    folder = tmp_path / "models"
    folder.mkdir()
    copy_long_context_demo_model(folder / f"{LONG}.gguf", TRAINED)
    data = tmp_path / "data"
    data.mkdir()
    token = create_token(data)
    process = ServeProcess(data, "--models-dir", str(folder))
    process.start()
    try:
        yield process, token, data
    finally:
        if process.proc is not None and process.proc.poll() is None:
            process.terminate()


def v1_model(process: ServeProcess, token: str) -> dict[str, Any]:
    status, model = call(f"{process.url}/v1/models/{LONG}", token)
    assert status == 200, model
    return model


def num_ctx(client: Client) -> int:
    """The context /api/show tells, as Continue reads it: `num_ctx` in `parameters`."""
    shown = client.show(LONG)
    assert shown.modelinfo and shown.modelinfo["llama.context_length"] == TRAINED
    [value] = [
        line.split()[1]
        for line in (shown.parameters or "").splitlines()
        if line.startswith("num_ctx")
    ]
    return int(value)


def running(client: Client) -> Any:
    [model] = [m for m in client.ps().models if m.model == f"{LONG}:latest"]
    return model


def test_ps_and_show_tell_the_context_and_memory_v1_models_tells(
    served: tuple[ServeProcess, str, Path],
) -> None:
    process, token, data = served
    client = Client(host=process.url, headers={"Authorization": f"Bearer {token}"}, timeout=120)
    try:
        # Not loaded: the plan it would load with now.
        before = v1_model(process, token)
        assert before["state"] == "unloaded" and before["context_length"] == 8192
        assert num_ctx(client) == 8192

        client.generate(LONG)  # Ollama's load: a generate without a prompt
        loaded = v1_model(process, token)
        assert loaded["state"] == "loaded" and loaded["context_length"] == 8192
        model = running(client)
        assert model.context_length == 8192
        # The memory the load takes (this CPU machine has no GPU part), not the file's size.
        assert model.size == loaded["memory_estimate"] and model.size_vram == 0
        assert model.size != loaded["size_bytes"]
        assert num_ctx(client) == 8192

        done = lmsp("models", "set", LONG, "--context", "16384", "--parallel", "1", data_dir=data)
        assert done.returncode == 0, done.stderr
        # Loaded, it runs with what it was loaded with until its next load: all three agree.
        assert v1_model(process, token)["context_length"] == 8192
        assert running(client).context_length == 8192 and num_ctx(client) == 8192

        client.generate(LONG, keep_alive=0)  # Ollama's unload (`ollama stop`)
        until_sync(
            lambda: v1_model(process, token)["state"] == "unloaded",
            limit=30,
            what="the model unloaded after keep_alive 0",
        )
        assert v1_model(process, token)["context_length"] == 16384
        assert num_ctx(client) == 16384  # what a load now would run with

        client.generate(LONG)
        again = v1_model(process, token)
        assert again["state"] == "loaded" and again["context_length"] == 16384
        model = running(client)
        assert model.context_length == 16384 and num_ctx(client) == 16384
        assert model.size == again["memory_estimate"] != loaded["memory_estimate"]
    finally:
        client._client.close()
