"""Downloads' rough edges a person meets: a search of an unreachable hub fails at once (one
try, as a pull does), and a download whose hub goes away says it waits within seconds,
writing no progress events while no bytes move."""

from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from aiohttp import web

from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull, search_hub
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.storage.store import Store
from tests.support.fake_hub import FakeHub, HubRepo
from tests.support.hub_repos import TINY_REPO, Hub, error_of, finished, hub_repos
from tests.support.polling import until

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


class StallingHub(FakeHub):
    """The fake hub, whose next file transfer goes quiet at `stall_at` bytes: the
    connection stays open and sends nothing more (a hub or proxy that hangs)."""

    stall_at: int | None = None

    async def _send(
        self,
        request: web.Request,
        response: web.StreamResponse,
        repo: HubRepo,
        name: str,
        first: int,
        size: int,
    ) -> None:
        stall_at, self.stall_at = self.stall_at, None  # one-shot
        if stall_at is None or not first <= stall_at < size:
            await super()._send(request, response, repo, name, first, size)
            return
        await response.write(repo.read(name, first, stall_at))
        await asyncio.Event().wait()  # until the client gives up (or the hub stops)


@pytest.fixture
async def stalling_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hub]:
    server = StallingHub(hub_repos())
    await server.start()
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    try:
        yield Hub(server, cache)
    finally:
        await server.stop()


@pytest.fixture
async def quick_manager(store: Store) -> AsyncIterator[DownloadManager]:
    """Progress looked at ten times a second, and short waits for the hub."""
    manager = DownloadManager(
        store.tasks, progress_every=0.1, retry_first=0.2, retry_most=0.5, retry_for=120
    )
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()


async def progress_rows(store: Store, task_id: str) -> list[dict[str, Any]]:
    events = await store.tasks.events(task_id)
    return [e for e in events if e["type"] == "download.progress"]


def repeated(rows: list[dict[str, Any]]) -> list[int]:
    """bytes_done of progress rows that say nothing new: the same bytes as the row before,
    no wait announced (what the Events tab showed some 30 times over)."""
    return [
        b["bytes_done"]
        for a, b in itertools.pairwise(rows)
        if b["bytes_done"] == a["bytes_done"] and "retry_at" not in b
    ]


async def test_a_stalled_transfer_writes_no_rows_and_resumes_from_its_bytes(
    stalling_hub: Hub, store: Store, quick_manager: DownloadManager
) -> None:
    stall_at = 1024 * 1024
    stalling_hub.server.stall_at = stall_at  # type: ignore[attr-defined]
    task = await pull(store.tasks, TINY_REPO, "Q4_K_M")
    row = await finished(store, task["id"])
    assert row["state"] == "completed", error_of(row)
    # The quiet connection was given up and the rest asked for from the bytes it had.
    assert stalling_hub.server.ranges() == [f"bytes={stall_at}-"]
    rows = await progress_rows(store, task["id"])
    # (The last row, written as the task completes, may repeat the full size.)
    assert repeated(rows[:-1]) == [], "progress rows written while no bytes moved"
    assert stall_at in [r["bytes_done"] for r in rows]


async def test_a_hub_gone_mid_download_shows_the_wait_at_once(
    hub: Hub, store: Store, quick_manager: DownloadManager
) -> None:
    hub.server.bytes_per_s = 1024 * 1024
    task = await pull(store.tasks, TINY_REPO, "Q4_K_M")

    async def halfway() -> bool:
        return any(r["bytes_done"] > 512 * 1024 for r in await progress_rows(store, task["id"]))

    await until(halfway, 30, "half a megabyte")
    port = urlparse(hub.server.url).port
    await hub.server.stop()  # the hub goes away mid-transfer

    async def waiting() -> list[dict[str, Any]]:
        return [r for r in await progress_rows(store, task["id"]) if "retry_at" in r]

    first_wait = (await until(waiting, 30, "the download to wait for the hub"))[0]
    # The refused reconnect is the wait's reason: not five silent retries of a "cut" first.
    assert "cannot be reached (Connection refused)" in first_wait["retry_reason"]
    rows = await progress_rows(store, task["id"])
    before_wait = rows[: rows.index(first_wait)]
    assert repeated(before_wait) == [], "progress rows written while no bytes moved"
    assert first_wait["bytes_done"] >= before_wait[-1]["bytes_done"]
    hub.server.bytes_per_s = None
    await hub.server.start(port or 0)  # back: it continues from the kept bytes
    row = await finished(store, task["id"])
    assert row["state"] == "completed", error_of(row)


async def test_a_huggingface_hub_warning_is_printed_once(
    hub: Hub, capfd: pytest.CaptureFixture[str]
) -> None:
    """The walk's log had each of huggingface_hub's 20 "Retrying in Ns" lines twice: its own
    stderr handler, and the app's logging it propagates to."""
    import logging

    root = logging.getLogger()
    app_handler = logging.StreamHandler()  # the app's logging, on stderr as in app.err
    root.addHandler(app_handler)
    try:
        await search_hub("tiny")  # any hub call (huggingface_hub imported and set up)
        capfd.readouterr()
        logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
    finally:
        root.removeHandler(app_handler)
    assert capfd.readouterr().err.count("Retrying in 1s [Retry 1/5].") == 1
