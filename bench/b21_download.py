"""B21 downloads: a model file pulled as a download task (hub listing, HEAD, GET into the
Hugging Face cache, sha256 checked, fsynced, linked) vs `curl -o` of the same file from the
same local hub server. Rounds alternate between the two; the best of each is compared.

The hub is the tests' fake (tests/support/fake_hub.py, sendfile for the body) in a thread of
its own, so neither client competes with it for the event loop.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from bench.report import Row
from lmsp_desktop.core.downloads.manager import DownloadManager
from lmsp_desktop.core.downloads.pull import pull
from lmsp_desktop.core.storage.store import Store
from tests.support.fake_hub import FakeHub, HubRepo

REPO = "bench/Big-GGUF"
FILE = "big-Q4_K_M.gguf"
BLOCK = 4 * 1024 * 1024


def make_file(path: Path, size: int) -> None:
    block = os.urandom(BLOCK)
    with path.open("wb") as f:
        for _ in range(size // BLOCK):
            f.write(block)


class HubThread:
    """The fake hub on its own loop in a daemon thread."""

    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(hub.start(), self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.hub.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def curl_once(url: str, out: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["curl", "-sS", "--fail", "-o", str(out), f"{url}/{REPO}/resolve/main/{FILE}"],
        check=True,
    )
    took = time.perf_counter() - started
    out.unlink()
    return took


async def task_once(data_dir: Path, cache: Path) -> float:
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(data_dir, ignore_errors=True)
    store = Store(data_dir)
    await store.open()
    manager = DownloadManager(store.tasks)
    await manager.start()
    ended = asyncio.Event()
    store.tasks.listeners.append(
        lambda change: ended.set() if change.state in ("completed", "failed") else None
    )
    try:
        started = time.perf_counter()
        task = await pull(store.tasks, REPO, FILE)
        await ended.wait()  # the commit of its last state, as a client would hear it
        took = time.perf_counter() - started
        row = await store.tasks.get(task["id"])
        assert row["state"] == "completed", row["error"]
    finally:
        await manager.stop()
        await store.close()
    return took


def run(work: Path, quick: bool) -> list[Row]:
    size = (64 if quick else 1024) * 1024 * 1024
    rounds = 2 if quick else 3
    source = work / FILE
    make_file(source, size)
    hub = HubThread(FakeHub([HubRepo(REPO, {FILE: source})]))
    cache = work / "hf-cache"
    saved = {k: os.environ.get(k) for k in ("HF_ENDPOINT", "HF_HUB_CACHE")}
    os.environ["HF_ENDPOINT"], os.environ["HF_HUB_CACHE"] = hub.url, str(cache)
    try:
        hub.hub.repos[REPO].sha256(FILE)  # the hub's digest, computed before timing
        curl_times, task_times = [], []
        for _ in range(rounds):
            curl_times.append(curl_once(hub.url, work / "curl.out"))
            task_times.append(asyncio.run(task_once(work / "data", cache)))
    finally:
        hub.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(cache, ignore_errors=True)
        source.unlink(missing_ok=True)
    load = os.getloadavg()[0]
    mb = size / 1e6
    curl_rate, task_rate = mb / min(curl_times), mb / min(task_times)
    note = f"{mb:.0f} MB over loopback, best of {rounds}; load {load:.1f}"
    ratio = task_rate / curl_rate
    return [
        Row(
            "B21",
            "download task throughput",
            round(task_rate),
            "MB/s",
            goal=">= 0.9x curl",
            ratio=round(ratio, 2),
            ratio_of="curl -o of the same file",
            passed=ratio >= 0.9,
            note=f"{note}; includes listing, HEAD, sha256 check, fsync, cache link",
        ),
        Row("B21", "curl -o, same file and server", round(curl_rate), "MB/s", note=note),
    ]
