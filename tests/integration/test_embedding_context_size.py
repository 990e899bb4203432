"""The embedding context is opened at the size the request's inputs need, not at its
2,048-token worst case: on a machine short of memory a short input is embedded, and only an
input whose context cannot fit is refused, with 507 insufficient_memory naming the figures
(review finding 5 on e501b37). The service with the demo model, its engine in this process
so that the memory can shrink after the load (other models loaded meanwhile), faked with
LMSP_MEMORY_AVAILABLE (docs/memory.md): 500 MiB holds the demo's embedding context for a
one-word input (64 tokens: 36 MiB) but not for a 1,500-token one (2,048 tokens: 860 MiB)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.engines.llama import LlamaEngine
from lmsp_desktop.core.models import machine
from tests.integration.serve_process import call
from tests.integration.service_fixtures import ALL_SCOPES, MODEL, LiveCore

SHORT_OF_MEMORY = "500M"


def embed(live: LiveCore, token: str, text: str) -> tuple[int, Any]:
    # A 1,500-word input read on one thread took over a minute under a loaded CI (load 10
    # on 2 cores): the test's own 300 s timeout bounds it, not the default 60 s per call.
    body = {"model": MODEL, "input": text}
    return call(f"{live.url}/v1/embeddings", token, "POST", body, timeout=240)


def test_short_of_memory_a_short_input_is_embedded_and_a_long_one_refused_with_507(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = LiveCore(tmp_path / "data", engine=LlamaEngine(n_threads=1))
    try:
        token = live.token(*ALL_SCOPES)
        body = {"model": MODEL, "input": "Say hello.", "max_output_tokens": 4}
        status, answered = call(f"{live.url}/v1/responses", token, "POST", body)
        assert status == 200, answered
        _status, model = call(f"{live.url}/v1/models/{MODEL}", token)
        assert model["state"] == "loaded", model
        monkeypatch.setenv(machine.AVAILABLE_ENV, SHORT_OF_MEMORY)  # read at each check

        status, short = embed(live, token, "lighthouse")
        assert status == 200, short
        assert len(short["data"][0]["embedding"]) == 576  # the demo's vector

        status, refused = embed(live, token, "word " * 1500)
        assert status == 507, refused
        error = refused["error"]
        assert error["code"] == "insufficient_memory", error
        assert error["message"].startswith(
            "The embedding context needs about 860 MiB (inputs up to 2048 tokens), more than "
            f"the 500 MiB available ({machine.AVAILABLE_ENV}={SHORT_OF_MEMORY}). Free memory "
            "(unload other models) or split the input into shorter pieces, then try again."
        ), error

        # The model serves on: a short input still embeds, to the same vector.
        status, again = embed(live, token, "lighthouse")
        assert status == 200, again
        assert again["data"][0]["embedding"] == pytest.approx(
            short["data"][0]["embedding"], abs=1e-5
        )
        # Once the memory allows, the context opens again at the long input's size.
        monkeypatch.setenv(machine.AVAILABLE_ENV, "64G")
        status, long = embed(live, token, "word " * 1500)
        assert status == 200, long
        assert long["usage"]["prompt_tokens"] > 1024  # more than the next smaller size
    finally:
        live.stop()
