"""B10 memory: resident memory of the service and its engine workers while 4 requests
stream at once against while one does (the demo model loaded once), next to the size of the
weights (what a second copy would add) and of the KV caches. The service's worker opens its
first context at load and each other one when a request finds every open one busy
(314e053): the growth from 1 to 4 requests is those contexts' KV caches, which llama.cpp
clears (makes resident) as it opens them, and must be no more than that plus less than one
weights copy."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp

from bench.b9_concurrency import stream
from bench.common import BenchServer, demo_model
from bench.report import Row
from lmsp_desktop.core.config import Settings
from lmsp_desktop.core.engines.llama_layout import DEFAULT_CONTEXT, context_layout
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta

MIB = 2**20


def rss(pid: int) -> int:
    """Resident memory of a process and of all its descendants (the engine workers, which
    hold the model since each loaded model runs in its own process)."""
    total = 0
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmRSS:"):
            total += int(line.split()[1]) * 1024
    for task in _tasks(pid):
        for child in _read(f"/proc/{pid}/task/{task}/children").split():
            total += rss(int(child))
    return total


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:  # the process ended meanwhile
        return ""


def _tasks(pid: int) -> list[str]:
    try:
        return [p.name for p in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


def kv_bytes_per_sequence(path: Path) -> int:
    """f16 K and V of every layer for a full context (what llama.cpp allocates per sequence)."""
    meta = read_gguf_meta(path)
    arch = meta.architecture or "llama"
    values = meta.values
    layers = int(values[f"{arch}.block_count"])
    heads = int(values[f"{arch}.attention.head_count"])
    kv_heads = int(values.get(f"{arch}.attention.head_count_kv", heads))
    head_dim = int(values[f"{arch}.embedding_length"]) // heads
    # The service runs a model with its trained context (no max_context cap by default).
    context = int(meta.context_length or DEFAULT_CONTEXT)
    return 2 * layers * kv_heads * head_dim * 2 * context


async def peak_during(server: BenchServer, concurrent: int, max_tokens: int) -> int:
    """The highest resident memory sampled while `concurrent` streams run."""
    assert server.proc is not None
    pid = server.proc.pid
    url = f"http://127.0.0.1:{server.port}"
    peak = rss(pid)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1200)) as session:
        work = asyncio.gather(
            *(stream(session, url, server.token, i, max_tokens) for i in range(concurrent))
        )
        while not work.done():
            peak = max(peak, rss(pid))
            await asyncio.sleep(0.05)
        await work
    return max(peak, rss(pid))


async def _measure(work: Path, max_tokens: int) -> tuple[int, int]:
    with BenchServer(work / "b10", "--engine", "llama", "--demo", "--parallel", "4") as server:
        server.start()
        await peak_during(server, 1, 8)  # loads the model
        one = await peak_during(server, 1, max_tokens)
        four = await peak_during(server, 4, max_tokens)
    return one, four


def run(work: Path, quick: bool) -> list[Row]:
    max_tokens = 4 if quick else 96
    one, four = asyncio.run(_measure(work, max_tokens))
    weights = os.path.getsize(demo_model())
    kv = kv_bytes_per_sequence(demo_model())
    grew = four - one
    # The sequences of the contexts opened for the second request on (all but the first's).
    # The service's own layout: its threads per context (Settings.threads) on these cores.
    layout = context_layout(4, Settings().threads(), os.cpu_count() or 1)
    opened = sum(layout[1:]) * kv
    return [
        Row("B10", "service + workers RSS, 1 request streaming", one / MIB, "MiB"),
        Row(
            "B10",
            "service + workers RSS, 4 requests streaming at once",
            four / MIB,
            "MiB",
            "grows < 1 weights copy + the KV opened",
            four / one,
            "1 request",
            grew - opened < weights and grew <= 4 * kv,
            note=f"grew {grew / MIB:.1f} MiB; weights {weights / MIB:.0f} MiB; "
            f"KV cache {kv / MIB:.0f} MiB per sequence, {opened / MIB:.0f} MiB of it in the "
            f"contexts opened on demand (layout {layout})",
        ),
    ]
