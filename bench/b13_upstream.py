"""B13 upstream streaming: tokens/s of a stream read through this service from an upstream
(llama-cpp-python's OpenAI-compatible server on the demo model), against the same stream read
directly from the upstream. Goal ≥ 0.95×.

The rate is tokens over the time from sending the request to the last token: a decode rate
between the first and last token would flatter the path whose first token comes late and the
rest in bursts (ours batches deltas per commit), and the prompt is cached on both paths."""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.b3_stream import cpu_seconds
from bench.common import ROOT, BenchServer, demo_model, free_port
from bench.llm import LLAMA_SERVER_MAIN, PROMPT
from bench.report import Row

ALIAS = "smol"
MODEL = f"up/{ALIAS}"


class Stream:
    """When the request went out and when each token arrived."""

    def __init__(self) -> None:
        self.sent = time.perf_counter()
        self.times: list[float] = []
        self.text = ""

    def rate(self) -> float:
        if not self.times:
            return float("nan")
        return len(self.times) / (self.times[-1] - self.sent)


class ServerProcess:
    """An OpenAI-compatible server in its own process on `port`, its output in `log`;
    started once it lists its models (within `patience_s`)."""

    def __init__(self, log: Path, port: int, args: list[str], patience_s: float) -> None:
        self.log = log
        self.port = port
        self.args = args
        self.patience_s = patience_s
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        # The child keeps its own copy of the log's descriptor; ours is closed at once.
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(  # noqa: ASYNC220  (started once, returns at once)
                [sys.executable, *self.args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
            )
        deadline = time.monotonic() + self.patience_s
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                try:
                    async with session.get(f"{self.url}/models") as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.args[1]} did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def llama_server(work: Path) -> ServerProcess:
    """`python -m llama_cpp.server` on the demo model, one thread."""
    port = free_port()
    args = [
        "-c", LLAMA_SERVER_MAIN, "--model", str(demo_model()),
        "--host", "127.0.0.1", "--port", str(port), "--model_alias", ALIAS,
        "--n_threads", "1", "--interrupt_requests", "False",
    ]  # fmt: skip
    return ServerProcess(work / "upstream.log", port, args, patience_s=120)


def paced_server(work: Path, tokens: int, every_s: float) -> ServerProcess:
    """A scripted upstream streaming at a fixed pace (bench/paced_upstream.py), so that the
    two paths are compared on exactly the same token timing."""
    port = free_port()
    args = ["-m", "bench.paced_upstream", str(port), str(tokens), str(every_s)]
    return ServerProcess(work / "paced.log", port, args, patience_s=30)


async def direct(upstream: ServerProcess, max_tokens: int, model: str = ALIAS) -> Stream:
    """The upstream's own Chat Completions stream, read as a client would."""
    stream = Stream()
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session,
        session.post(f"{upstream.url}/chat/completions", json=body) as resp,
    ):
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                content = choice.get("delta", {}).get("content")
                if content:
                    stream.times.append(time.perf_counter())
                    stream.text += content
    return stream


async def through(server: BenchServer, max_tokens: int, model: str = MODEL) -> Stream:
    """The same generation as a streamed response of this service on `up/smol`."""
    stream = Stream()
    body: dict[str, Any] = {
        "model": model,
        "input": PROMPT,
        "stream": True,
        "max_output_tokens": max_tokens,
        "temperature": 0,
    }
    headers = {"Authorization": f"Bearer {server.token}"}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session,
        session.post(
            f"http://127.0.0.1:{server.port}/v1/responses", json=body, headers=headers
        ) as resp,
    ):
        if resp.status != 200:
            raise RuntimeError(f"stream create answered {resp.status}: {await resp.text()}")
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.output_text.delta":
                stream.times.append(time.perf_counter())
                stream.text += event["delta"]
            elif event["type"] in ("response.completed", "response.incomplete", "error"):
                break
    return stream


async def _wait_listed(server: BenchServer, model: str = MODEL) -> None:
    headers = {"Authorization": f"Bearer {server.token}"}
    async with aiohttp.ClientSession() as session:
        for _ in range(300):
            async with session.get(
                f"http://127.0.0.1:{server.port}/v1/models", headers=headers
            ) as resp:
                page = await resp.json()
            if any(m["id"] == model and m["upstream"]["reachable"] for m in page["data"]):
                return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{model} was never listed")


def _best(streams: list[Stream]) -> Stream:
    valid = [s for s in streams if not math.isnan(s.rate())]
    return max(valid, key=lambda s: s.rate())


async def _register(data_dir: Path, name: str, url: str) -> None:
    done = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data_dir),
        "upstream", "add", name, url, cwd=ROOT,
    )  # fmt: skip
    if await done.wait() != 0:
        raise RuntimeError(f"upstream add {name} failed")


@dataclass
class Found:
    streams: dict[str, list[Stream]]
    serve_cpu_s: float = 0.0  # over the runs through the service from llama_cpp.server
    upstream_cpu_s: dict[str, float] = field(default_factory=lambda: {"direct": 0, "through": 0})

    def ratios(self, kind: str, of: str) -> list[float]:
        pairs = zip(self.streams[kind], self.streams[of], strict=True)
        return [a.rate() / b.rate() for a, b in pairs]

    def tokens(self, kind: str) -> int:
        return sum(len(s.times) for s in self.streams[kind])


async def _measure(work: Path, max_tokens: int, rounds: int) -> Found:
    upstream = llama_server(work)
    paced = paced_server(work, max_tokens, 0.005)
    await upstream.start()
    await paced.start()
    data_dir = work / "b9"
    await _register(data_dir, "up", upstream.url)
    await _register(data_dir, "paced", paced.url)
    found = Found({k: [] for k in ("direct", "through", "pd", "pt")})
    try:
        with BenchServer(data_dir, "--engine", "fake") as server:
            server.start()
            await _wait_listed(server)
            await _wait_listed(server, "paced/m1")
            await through(server, min(16, max_tokens))  # warm both paths
            await direct(upstream, min(16, max_tokens))
            assert server.proc is not None and upstream.proc is not None
            serve, up = server.proc.pid, upstream.proc.pid
            for i in range(rounds):  # interleaved, each path first in turn
                for path in ("through", "direct") if i % 2 == 0 else ("direct", "through"):
                    before = cpu_seconds(serve), cpu_seconds(up)
                    if path == "through":
                        found.streams[path].append(await through(server, max_tokens))
                    else:
                        found.streams[path].append(await direct(upstream, max_tokens))
                    after = cpu_seconds(serve), cpu_seconds(up)
                    if path == "through":
                        found.serve_cpu_s += after[0] - before[0]
                    found.upstream_cpu_s[path] += after[1] - before[1]
                for path in ("pt", "pd") if i % 2 == 0 else ("pd", "pt"):
                    if path == "pt":
                        found.streams[path].append(await through(server, max_tokens, "paced/m1"))
                    else:
                        found.streams[path].append(await direct(paced, max_tokens, "m1"))
    finally:
        upstream.stop()
        paced.stop()
    return found


def _spread(ratios: list[float]) -> str:
    return f"median {statistics.median(ratios):.2f}×, rounds {min(ratios):.2f}-{max(ratios):.2f}×"


def run(work: Path, quick: bool) -> list[Row]:
    max_tokens, rounds = (16, 1) if quick else (128, 8)
    work.mkdir(parents=True, exist_ok=True)
    found = asyncio.run(_measure(work, max_tokens, rounds))
    rate = {k: statistics.median(s.rate() for s in v) for k, v in found.streams.items()}
    ratio = statistics.median(found.ratios("through", "direct"))
    paced_ratio = statistics.median(found.ratios("pt", "pd"))
    best_vs_best = _best(found.streams["through"]).rate() / _best(found.streams["direct"]).rate()
    per_token_ms = {
        "serve": 1000 * found.serve_cpu_s / found.tokens("through"),
        "up_through": 1000 * found.upstream_cpu_s["through"] / found.tokens("through"),
        "up_direct": 1000 * found.upstream_cpu_s["direct"] / found.tokens("direct"),
    }
    return [
        Row(
            "B13",
            "upstream stream read directly (llama_cpp.server, greedy)",
            rate["direct"],
            "tok/s",
            note=f"{rounds} rounds of {max_tokens} tokens, each path first in turn; figure: "
            "median tok/s; ratio: median of the rounds' ratios; request to last token, "
            f"prompt cached; the upstream's CPU per token {per_token_ms['up_direct']:.2f} ms",
        ),
        Row(
            "B13",
            "the same stream through this service (up/smol, SSE)",
            rate["through"],
            "tok/s",
            "≥ 0.95×",
            ratio,
            "direct",
            ratio >= 0.95,
            note=f"{_spread(found.ratios('through', 'direct'))}, best vs best "
            f"{best_vs_best:.2f}×; CPU per token: serve {per_token_ms['serve']:.2f} ms, the "
            f"upstream {per_token_ms['up_through']:.2f} ms",
        ),
        Row(
            "B13",
            "paced upstream (a token every 5 ms) read directly",
            rate["pd"],
            "tok/s",
            note="the same token timing on both paths: the service's own cost alone",
        ),
        Row(
            "B13",
            "paced upstream through this service (SSE)",
            rate["pt"],
            "tok/s",
            "≥ 0.95×",
            paced_ratio,
            "direct",
            paced_ratio >= 0.95,
            note=_spread(found.ratios("pt", "pd")),
        ),
    ]
