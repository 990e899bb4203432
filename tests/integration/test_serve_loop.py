"""`lmsp-desktop serve` runs on uvloop where it is installed (lmsp_desktop/service_loop.py,
B1), and answers, creates and stops there as it does on asyncio's loop."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from lmsp_desktop import service_loop
from tests.integration.serve_process import ServeProcess, call, create_token


def uvloop_module() -> object:
    # pyproject installs uvloop everywhere but Windows, where serve runs on asyncio's loop.
    return pytest.importorskip("uvloop", reason="uvloop is not installed on Windows")


def test_the_service_loop_is_uvloop_where_installed() -> None:
    async def which() -> type:
        return type(asyncio.get_running_loop())

    assert service_loop.run(which()) is uvloop_module().Loop  # type: ignore[attr-defined]


def test_a_real_serve_runs_on_uvloop_and_creates_and_stops(tmp_path: Path) -> None:
    uvloop_module()
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


def _collections(url: str, token: str) -> list[int]:
    request = urllib.request.Request(
        f"{url}/v1/metrics", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        text = response.read().decode()
    found = re.findall(r'^lmsp_gc_collections_total\{generation="(\d)"\} (\d+)$', text, re.M)
    assert [g for g, _ in found] == ["0", "1", "2"], text
    return [int(n) for _, n in found]


def test_a_burst_of_concurrent_requests_pauses_serve_for_no_garbage_collection(
    tmp_path: Path,
) -> None:
    """64 clients at once hold many young objects: with CPython's default collector, serve
    walked them every 700 allocations and then the whole heap (B1's CPU and p99 pauses).
    The requests name no model, so each is parsed, authenticated, read and answered 404 at
    the model lookup: the requests' own objects, not a create's rows (B1 runs creates)."""
    data_dir = tmp_path / "data"
    token = create_token(data_dir)
    serve = ServeProcess(data_dir)
    url = serve.start()
    try:
        before = _collections(url, token)

        async def burst() -> list[int]:
            headers = {"Authorization": f"Bearer {token}"}
            body = {"model": "nope", "input": "hi", "background": True}
            async with aiohttp.ClientSession(headers=headers) as session:

                async def create() -> int:
                    async with session.post(f"{url}/v1/responses", json=body) as response:
                        await response.read()
                        return response.status

                statuses: list[int] = []
                for _ in range(5):
                    statuses += await asyncio.gather(*(create() for _ in range(64)))
                return statuses

        assert set(asyncio.run(burst())) == {404}
        assert _collections(url, token) == before, "serve paused to collect garbage"
    finally:
        assert serve.terminate() == 0, serve.stderr()[-2000:]
