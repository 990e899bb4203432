"""B16 prefill: time to first token of a long prompt (about 2k and 8k tokens) streamed from the
service, against llama-cpp-python's own `Llama.eval` of the very same tokens (n_batch 512,
every core) in a fresh process, in the same run; and the token rate of two running streams
while such a prompt is read, against their rate before it arrived.

    python -m bench.b16_prefill [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import ROOT, BenchServer, demo_model
from bench.llm import MODEL_ID, PROMPT, plain_llama
from bench.report import Row

SIZES = (2000, 8000)
CONTEXT = 8192  # the demo model's trained context, passed explicitly


def notes(count: int, run: int) -> str:
    """A prompt of about 38 tokens per note; `run` makes its first tokens unique, so no run
    reuses another's cached prefix."""
    lines = (
        f"Note {i}: the keeper of lighthouse {i * 7 % 13} wrote that the storm on day {i} "
        f"brought {i * 3 % 11} ships, {i % 5} gulls and a {('red', 'blue', 'green')[i % 3]} "
        "lantern to the harbour."
        for i in range(count)
    )
    return f"Run {run}. " + " ".join(lines) + "\nSummarise the notes."


def notes_for(tokens: int, run: int) -> str:
    return notes(max(1, (tokens - 20) // 38), run)


async def first_token(server: BenchServer, text: str, session: aiohttp.ClientSession) -> float:
    """Seconds from sending a streamed create to its first output_text.delta."""
    body = {
        "model": MODEL_ID,
        "input": text,
        "stream": True,
        "max_output_tokens": 2,
        "temperature": 0,
    }
    url = f"http://127.0.0.1:{server.port}/v1/responses"
    headers = {"Authorization": f"Bearer {server.token}"}
    start = time.perf_counter()
    took: float | None = None
    async with session.post(url, json=body, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"create answered {resp.status}: {await resp.text()}")
        async for raw in resp.content:
            delta = raw.startswith(b"data: ") and b'"response.output_text.delta"' in raw
            if delta and took is None:
                took = time.perf_counter() - start
    if took is None:
        raise RuntimeError("the response ended without a text token")
    return took


async def stream_times(
    server: BenchServer,
    session: aiohttp.ClientSession,
    prompt: str,
    times: list[float],
    running: asyncio.Event,
) -> None:
    """A long streamed generation; appends each text token's arrival time, and sets
    `running` once `times` holds 10."""
    body = {
        "model": MODEL_ID,
        "input": prompt,
        "stream": True,
        "max_output_tokens": 4000,
        "temperature": 0,
    }
    url = f"http://127.0.0.1:{server.port}/v1/responses"
    headers = {"Authorization": f"Bearer {server.token}"}
    async with session.post(url, json=body, headers=headers) as resp:
        async for raw in resp.content:
            if raw.startswith(b"data: ") and b'"response.output_text.delta"' in raw:
                times.append(time.perf_counter())
                if len(times) >= 10:
                    running.set()


def rate(times: list[float], start: float, end: float) -> float:
    inside = [t for t in times if start <= t <= end]
    return len(inside) / (end - start) if end > start else float("nan")


async def neighbours(server: BenchServer, tokens: int, window: float) -> tuple[float, float, float]:
    """Two streams run; then a `tokens`-token prompt arrives. Returns (their tokens/s in
    the window before it, their tokens/s while it was read, its time to first token)."""
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        times: list[float] = []
        running = asyncio.Event()
        streams = [
            asyncio.create_task(
                stream_times(server, session, f"{PROMPT} Part {i}.", times, running)
            )
            for i in range(2)
        ]
        await running.wait()
        before = time.perf_counter()
        await asyncio.sleep(window)
        sent = time.perf_counter()
        ttft = await first_token(server, notes_for(tokens, 999), session)
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    return rate(times, before, sent), rate(times, sent, sent + ttft), ttft


def llama_eval(text: str) -> tuple[int, float]:
    """(prompt tokens, seconds) of `Llama.eval` of the tokens the service reads for `text`,
    in a fresh process (see `eval_main`)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.b16_prefill", "--eval"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=3600,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return int(data["tokens"]), float(data["seconds"])


def eval_main() -> None:
    """The peer: the service's own prompt tokens (its chat template) for the text on stdin,
    evaluated by a plain llama_cpp.Llama with n_batch 512 on every core."""
    from lmsp_desktop.core.engines.llama import LlamaEngine

    text = sys.stdin.read()

    async def prompt_tokens() -> list[int]:
        model = await LlamaEngine(n_ctx=CONTEXT, parallel=1, contexts=1).load(demo_model())
        try:
            messages = [{"role": "user", "content": text}]
            return model.tokenize_prompt(model.render_prompt(messages))
        finally:
            await model.unload()

    tokens = asyncio.run(prompt_tokens())
    cores = os.cpu_count() or 1
    llama = plain_llama(
        demo_model(),
        n_ctx=CONTEXT,
        n_batch=512,
        n_threads=cores,
        n_threads_batch=cores,
        verbose=False,
    )
    start = time.perf_counter()
    llama.eval(tokens)
    took = time.perf_counter() - start
    llama.close()
    print(json.dumps({"tokens": len(tokens), "seconds": took}))


async def _measure(work: Path, sizes: tuple[int, ...], repeats: int) -> dict[str, Any]:
    found: dict[str, Any] = {"ttft": {}, "eval": {}, "tokens": {}}
    with BenchServer(
        work / "b16", "--engine", "llama", "--demo", "--max-context", str(CONTEXT)
    ) as server:
        server.start()
        timeout = aiohttp.ClientTimeout(total=3600)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await first_token(server, notes(3, 0), session)  # loads the model
            run = 1
            for _ in range(repeats):
                for size in sizes:  # interleaved: slow phases of the machine hit both
                    text = notes_for(size, run)
                    run += 1
                    ttft = await first_token(server, text, session)
                    tokens, took = await asyncio.to_thread(llama_eval, text)
                    found["ttft"].setdefault(size, []).append(ttft)
                    found["eval"].setdefault(size, []).append(took)
                    found["tokens"][size] = tokens
        found["neighbours"] = await neighbours(server, sizes[0], 1.0 if repeats == 1 else 5.0)
    return found


def run(work: Path, quick: bool) -> list[Row]:
    sizes, repeats = ((300,), 1) if quick else (SIZES, 2)
    # (quick: one repeat, and a 1 s window before the prompt instead of 5 s)
    found = asyncio.run(_measure(work, sizes, repeats))
    rows = []
    for size in sizes:
        ttft, took = min(found["ttft"][size]), min(found["eval"][size])
        tokens = found["tokens"][size]
        rows.append(
            Row(
                "B16",
                f"time to first token, {tokens:,}-token prompt (service)",
                ttft,
                "s",
                "≥ 0.9×",
                took / ttft,
                "Llama.eval",
                took >= 0.9 * ttft,
                note=f"best of {repeats}; Llama.eval of the same tokens {took:.2f} s "
                f"(n_batch 512, {os.cpu_count()} threads); load {os.getloadavg()[0]:.1f}",
            )
        )
    before, during, ttft = found["neighbours"]
    rows.append(
        Row(
            "B16",
            f"2 running streams while a {sizes[0]}-token prompt is read",
            during,
            "tok/s",
            "",
            during / before if before else None,
            "their rate before",
            None,
            note=f"{before:.1f} tok/s before it arrived; its first token after {ttft:.2f} s",
        )
    )
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.b16_prefill")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--eval", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.eval:
        eval_main()
    else:
        from bench.report import table

        with __import__("tempfile").TemporaryDirectory() as tmp:
            print(table(run(Path(tmp), args.quick)))
