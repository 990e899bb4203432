"""Streaming helpers for the real-model benchmarks (B3, B8): an SSE client over aiohttp and
the two in-process baselines (the project's engine, plain llama_cpp)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import ROOT, BenchServer, demo_model
from lmsp_desktop.core.engines.llama_layout import DEFAULT_THREADS

PROMPT = "Write a long, detailed story about a lighthouse keeper who lives through a storm."
MODEL_ID = "smollm2-135m-instruct"


# `python -m llama_cpp.server` with the engine's AMX guard (llama_native.usable_buffers): on
# machines whose CPU advertises AMX but whose kernel does not enable it, llama-cpp-python's
# server died with SIGILL on its first prompt like the engine did. Used as `python -c
# LLAMA_SERVER_MAIN <server flags>` by the upstream tests and B13.
LLAMA_SERVER_MAIN = """
import runpy
import llama_cpp.llama_cpp as lc
from lmsp_desktop.core.engines.llama_native import usable_buffers
defaults = lc.llama_model_default_params
lc.llama_model_default_params = lambda: usable_buffers(defaults())
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


@dataclass
class Stream:
    """Arrival times of the text tokens of one generation (one entry per token)."""

    times: list[float] = field(default_factory=list)
    text: str = ""
    response_id: str = ""
    end_type: str = ""
    end_time: float = 0.0
    cpu_s: float = 0.0  # CPU the generating process spent on it (in-process baselines)

    def rate(self) -> float:
        """Decode tokens/s: tokens after the first over the time since the first (prompt
        processing excluded, as it is the same work everywhere)."""
        if len(self.times) < 2 or self.times[-1] <= self.times[0]:
            return float("nan")
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])

    def token_time(self) -> float:
        """Seconds per decoded token: the inverse of `rate`. Not the median gap between
        arrivals: the service commits (and sends) the tokens of each 50 ms together, so most
        gaps between arrivals are 0."""
        return 1.0 / self.rate()


def body(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL_ID,
        "input": PROMPT,
        "stream": True,
        "max_output_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }


async def sse_generate(
    server: BenchServer,
    max_tokens: int,
    on_token: Any = None,
    **extra: Any,
) -> Stream:
    """POST a streaming create and record when each output_text.delta arrives. `on_token`
    (async, called with the Stream after each token) may act mid-stream (B8 cancels, B17
    kills the engine); `extra` goes into the request body (`on_restart`)."""
    stream = Stream()
    headers = {"Authorization": f"Bearer {server.token}"}
    url = f"http://127.0.0.1:{server.port}/v1/responses"
    timeout = aiohttp.ClientTimeout(total=600)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(url, json=body(max_tokens, **extra), headers=headers) as resp,
    ):
        if resp.status != 200:
            raise RuntimeError(f"stream create answered {resp.status}: {await resp.text()}")
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            now = time.perf_counter()
            event = json.loads(line[6:])
            kind = event["type"]
            if kind == "response.created":
                stream.response_id = event["response"]["id"]
            elif kind == "response.output_text.delta":
                stream.times.append(now)
                stream.text += event["delta"]
                if on_token is not None:
                    await on_token(stream)
            elif kind in ("response.completed", "response.incomplete", "error", "response.failed"):
                stream.end_type, stream.end_time = kind, now
                break
    return stream


# One API's stream of the same generation as `sse_generate` (B14 Chat Completions, B19
# Anthropic Messages).
StreamOf = Callable[[BenchServer, int], Awaitable[Stream]]


def best(streams: list[Stream]) -> Stream:
    """The fastest of the repeats: the CPU is shared, and the best run is the one least
    disturbed by others (the same rule for both streams compared)."""
    valid = [s for s in streams if not math.isnan(s.rate())]
    return max(valid, key=lambda s: s.rate())


async def against_responses(
    work: Path, other: StreamOf, max_tokens: int, repeats: int
) -> tuple[Stream, Stream]:
    """The best of `repeats` streams of `other` and of the Responses API, from one service
    on the demo model, interleaved with each going first in turn (slow phases of the shared
    machine hit both alike)."""
    others: list[Stream] = []
    responses: list[Stream] = []
    with BenchServer(
        work, "--engine", "llama", "--demo", "--threads", str(DEFAULT_THREADS)
    ) as server:
        server.start()
        await sse_generate(server, 16)  # loads the model and warms it up
        for i in range(repeats):
            if i % 2:
                others.append(await other(server, max_tokens))
            responses.append(await sse_generate(server, max_tokens))
            if not i % 2:
                others.append(await other(server, max_tokens))
    return best(others), best(responses)


# The in-process peers: the project's engine with the OpenMP wait policy its worker runs
# with (passive, llama_native.lowlevel), the same engine with llama.cpp's own default (no
# OMP_WAIT_POLICY: threads spin a while at each barrier), and plain llama_cpp.
ENGINE, ENGINE_OMP_DEFAULT, LLAMA = "engine", "engine-omp-default", "llama"
# An in-process generation stops after this long (its rate counts the tokens it made): with
# spinning OpenMP threads on a loaded machine a 128-token run took minutes (0.7 tok/s).
IN_PROCESS_CAP_S = 10.0


def measure_in_process(kind: str, max_tokens: int) -> Stream:
    """One warm-up generation, then the measured one, in this process."""

    async def go() -> Stream:
        local = InProcess(demo_model())
        await local.load(with_llama=kind == LLAMA)
        try:
            for tokens in (min(16, max_tokens), max_tokens):  # a short warm-up, then measured
                # Every thread of this process (llama.cpp's decode threads included).
                cpu = time.process_time()
                if kind != LLAMA:
                    stream = await local.engine_generate(tokens)
                else:
                    stream = await asyncio.to_thread(local.llama_generate, tokens)
                stream.cpu_s = time.process_time() - cpu
        finally:
            await local.close()
        return stream

    return asyncio.run(go())


def in_subprocess(kind: str, max_tokens: int) -> Stream:
    """measure_in_process in a fresh process: two llama.cpp contexts in one process slow
    each other down (idle worker threads), and a first generation is always slow."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.llm", kind, str(max_tokens)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=600,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return Stream(times=data["times"], text=data["text"], cpu_s=data["cpu_s"])


def plain_llama(path: Path, **settings: Any) -> Any:
    """llama_cpp.Llama on `path`, with the model parameters the engine loads with
    (llama_native.usable_buffers: no AMX buffers where they crash); `settings` go to Llama.
    llama.cpp is loaded as the engine loads it (llama_native.lowlevel: OpenMP threads sleep
    at barriers), so a peer in a process that had not run the engine before (`--only B18`)
    waits as the engine's worker does, instead of spinning."""
    from lmsp_desktop.core.engines.llama_native import lowlevel, usable_buffers

    lowlevel()  # before llama_cpp's first import in this process
    import llama_cpp
    import llama_cpp.llama_cpp as low

    defaults = low.llama_model_default_params
    # Llama reads the defaults while it constructs.
    low.llama_model_default_params = lambda: usable_buffers(defaults())
    try:
        return llama_cpp.Llama(model_path=str(path), **settings)
    finally:
        low.llama_model_default_params = defaults


class InProcess:
    """The demo model loaded in this process twice over: through the project's LlamaEngine
    (its per-token path, no store, no HTTP) and as a plain llama_cpp.Llama."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.model: Any = None
        self.llama: Any = None

    async def load(self, with_llama: bool) -> None:
        from lmsp_desktop.core.engines.llama import LlamaEngine
        from lmsp_desktop.core.engines.llama_layout import DEFAULT_CONTEXT

        engine = LlamaEngine()
        self.model = await engine.load(self.path)  # also renders the prompt for llama_cpp
        if not with_llama:
            return
        # The same settings the engine opened its model with (n_ctx capped at 4096 there).
        self.llama = await asyncio.to_thread(
            plain_llama,
            self.path,
            n_ctx=min(DEFAULT_CONTEXT, self.model.context_length),
            n_batch=512,
            n_threads=DEFAULT_THREADS,
            n_threads_batch=DEFAULT_THREADS,
            verbose=False,
        )

    async def engine_generate(self, max_tokens: int) -> Stream:
        from lmsp_desktop.core.engines.base import GenerationRequest, TokenPiece
        from lmsp_desktop.core.runner import COMMIT_INTERVAL_S

        stream = Stream()
        # The work the service's worker does: tokens handed over in groups of the runner's
        # commit interval (the worker runs the engine with the task's sink_interval), not
        # one hand-over (and one event-loop wake-up) per token.
        request = GenerationRequest(
            messages=[{"role": "user", "content": PROMPT}],
            max_output_tokens=max_tokens,
            temperature=0.0,
            top_p=1.0,
            seed=1,
            sink_interval=COMMIT_INTERVAL_S,
        )
        cap = time.perf_counter() + IN_PROCESS_CAP_S

        async def sink(pieces: list[TokenPiece]) -> bool:
            now = time.perf_counter()
            for piece in pieces:
                if piece.text:
                    stream.times.append(now)
                    stream.text += piece.text
            return now < cap

        await self.model.generate(request, sink)
        return stream

    def llama_generate(self, max_tokens: int) -> Stream:
        stream = Stream()
        prompt = self.model.render_prompt([{"role": "user", "content": PROMPT}])
        self.llama.reset()
        for chunk in self.llama.create_completion(
            prompt=prompt, max_tokens=max_tokens, temperature=0.0, stream=True
        ):
            text = chunk["choices"][0]["text"]
            if text:
                stream.times.append(time.perf_counter())
                stream.text += text
        return stream

    async def close(self) -> None:
        if self.model is not None:
            await self.model.unload()
        if self.llama is not None:
            self.llama.close()


if __name__ == "__main__":
    if sys.argv[1] == ENGINE_OMP_DEFAULT:
        # libgomp reads OMP_WAIT_POLICY once, when llama_cpp's library loads it: load it
        # here without the variable (lowlevel() sets it only when the variable is unset).
        os.environ.pop("OMP_WAIT_POLICY", None)
        import llama_cpp.llama_cpp  # noqa: F401
    found = measure_in_process(sys.argv[1], int(sys.argv[2]))
    print(json.dumps({"times": found.times, "text": found.text, "cpu_s": found.cpu_s}))
