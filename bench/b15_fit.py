"""B15 sized to the machine: peak resident memory of the service and all its child
processes (engine workers) answering one request on a copy of the demo model whose GGUF
declares a 131,072-token trained context, with default settings. Goal: at most the weights
+ 1 GiB (12.0 GB before the memory planner: 4 sequences x 128k tokens of KV cache).

The estimate the service reports in /v1/models is shown beside the measured figure."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp

from bench.common import BenchServer, demo_model
from bench.report import Row

MIB = 2**20
GIB = 2**30
MODEL = "long-context"
TRAINED = 131_072


def tree_rss(pid: int) -> int:
    """Resident memory of `pid` and every process below it."""
    total = 0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            # A child started from another thread is listed under that thread's task.
            children = [
                child
                for task in Path(f"/proc/{current}/task").iterdir()
                for child in (task / "children").read_text().split()
            ]
        except OSError:
            continue
        todo.extend(int(child) for child in children)
    return total


def long_context_copy(folder: Path) -> Path:
    """The demo model declaring a 128k trained context (gguf-set-metadata, as issue 21)."""
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / f"{MODEL}.gguf"
    if not copy.exists():
        shutil.copyfile(demo_model(), copy)
        tool = Path(sys.executable).parent / "gguf-set-metadata"
        subprocess.run(
            [str(tool), str(copy), "llama.context_length", str(TRAINED), "--force"],
            check=True,
            capture_output=True,
        )
    return copy


async def _answer_one(server: BenchServer, max_tokens: int) -> tuple[int, dict[str, object]]:
    assert server.proc is not None
    pid = server.proc.pid
    url = f"http://127.0.0.1:{server.port}"
    headers = {"Authorization": f"Bearer {server.token}"}
    body = {"model": MODEL, "input": "Say hello.", "max_output_tokens": max_tokens}
    peak = tree_rss(pid)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        answer = asyncio.ensure_future(
            session.post(f"{url}/v1/responses", json=body, headers=headers)
        )
        while not answer.done():
            peak = max(peak, tree_rss(pid))
            await asyncio.sleep(0.02)
        response = await answer
        assert response.status == 200, await response.text()
        async with session.get(f"{url}/v1/models/{MODEL}", headers=headers) as listed:
            item = await listed.json()
    return max(peak, tree_rss(pid)), item


def run(work: Path, quick: bool) -> list[Row]:
    folder = work / "b15-models"
    copy = long_context_copy(folder)
    with BenchServer(work / "b15", "--engine", "llama", "--models-dir", str(folder)) as server:
        server.start()
        peak, item = asyncio.run(_answer_one(server, 4 if quick else 16))
    weights = os.path.getsize(copy)
    goal = weights + GIB
    estimate = item.get("memory_estimate")
    return [
        Row(
            "B15",
            "peak RSS (service + workers), 1 request, 128k-declared model, defaults",
            peak / MIB,
            "MiB",
            "<= weights + 1 GiB",
            peak / goal,
            "weights + 1 GiB",
            peak <= goal,
            note=f"runs with context {item.get('context_length')} of "
            f"{item.get('trained_context_length')} trained; estimate "
            f"{int(estimate) / MIB if isinstance(estimate, int) else 0:.0f} MiB; weights "
            f"{weights / MIB:.0f} MiB; load {os.getloadavg()[0]:.1f}",
        )
    ]
