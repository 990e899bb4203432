"""Downloads' rough edges a person meets: a search of an unreachable hub fails at once (one
try, as a pull does), and a download whose hub goes away says it waits within seconds,
writing no progress events while no bytes move."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from lmsp_desktop.core.downloads.pull import pull, search_hub
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage.store import Store
from tests.support.hub_repos import TINY_REPO, Hub

pytest_plugins = ["tests.integration.download_fixtures"]


@pytest.fixture
async def busy_hub(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[str]]:
    """A hub that answers every request 503 (overloaded); yields the paths it was asked."""
    asked: list[str] = []

    async def busy(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response({"error": "overloaded"}, status=503)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", busy)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    try:
        yield asked
    finally:
        await runner.cleanup()


async def test_a_search_of_a_busy_hub_fails_after_one_try_with_a_sentence(
    busy_hub: list[str],
) -> None:
    with pytest.raises(LmspError) as raised:
        await search_hub("smollm")
    assert raised.value.code == "hub_unreachable"
    assert "answered HTTP 503" in raised.value.message
    # huggingface_hub's list_models would have asked six times, 23 s of backoff in all.
    assert [path for path in busy_hub if path == "/api/models"] == ["/api/models"]


async def test_a_search_of_an_unreachable_hub_says_what_a_pull_says(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(LmspError) as searched:
        await search_hub("smollm")
    with pytest.raises(LmspError) as pulled:
        await pull(store.tasks, TINY_REPO, "Q4_K_M")
    assert searched.value.message == pulled.value.message
    assert "cannot be reached (Connection refused)" in searched.value.message


async def test_a_search_lists_the_gguf_repos_most_downloaded_first(hub: Hub) -> None:
    found = await search_hub("tiny")
    assert found, "the fake hub has repos named tiny"
    assert all(set(m) == {"id", "downloads", "likes"} for m in found)
    downloads = [m["downloads"] for m in found]
    assert downloads == sorted(downloads, reverse=True)
    assert TINY_REPO in [m["id"] for m in found]
