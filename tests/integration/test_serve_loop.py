"""`lmsp-desktop serve` runs on uvloop where it is installed (lmsp_desktop/service_loop.py,
B1), and answers, creates and stops there as it does on asyncio's loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lmsp_desktop import service_loop
from tests.integration.serve_process import ServeProcess, call, create_token

# pyproject installs uvloop everywhere but Windows, where serve runs on asyncio's own loop.
uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed on Windows")


def test_the_service_loop_is_uvloop_where_installed() -> None:
    async def which() -> type:
        return type(asyncio.get_running_loop())

    assert service_loop.run(which()) is uvloop.Loop


def test_a_real_serve_runs_on_uvloop_and_creates_and_stops(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    token = create_token(data_dir)
    serve = ServeProcess(data_dir)
    url = serve.start()
    try:
        assert serve.proc is not None
        maps = Path(f"/proc/{serve.proc.pid}/maps").read_text()
        assert "uvloop/loop." in maps, "serve did not load uvloop's loop"
        status, body = call(f"{url}/v1/health", token)
        assert status == 200, body
        status, body = call(f"{url}/v1/responses", token, "POST", {"model": "nope", "input": "hi"})
        assert (status, body["error"]["code"]) == (404, "model_not_found")
    finally:
        assert serve.terminate() == 0, serve.stderr()[-2000:]
