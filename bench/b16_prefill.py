"""B16 prefill: time to first token of a long prompt (about 2k and 8k tokens) streamed from the
service, against llama-cpp-python's own `Llama.eval` of the very same tokens in a fresh
process, in the same run; the same for a 2k prompt that arrives while two streams run (issue
21 item 3: "while other sequences keep streaming"); and those streams' token rate while the
prompt is read (they must keep streaming).

The peer runs with the service's settings for a prompt: the same context per sequence,
n_batch = n_ubatch 512, flash attention off, f16 KV cache, every core, and the OpenMP wait
policy the engine sets (llama_native.lowlevel). Service and peer alternate, each going first
in turn, and the best of the repeats counts: slow phases of the shared machine hit both.

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


async def neighbours(server: BenchServer, text: str, window: float) -> tuple[float, float, float]:
    """Two streams run; then the prompt `text` arrives. Returns (their tokens/s in the window
    before it, their tokens/s while it was read, its time to first token)."""
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
        ttft = await first_token(server, text, session)
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    return rate(times, before, sent), rate(times, sent, sent + ttft), ttft


def llama_eval(text: str) -> tuple[int, float]:
    """(prompt tokens, seconds) of `Llama.eval` of the tokens the service reads for `text`,
    in a fresh process (see `eval_main`)."""
    # The engine's wait policy, said outright: the peer's process must not depend on what
    # this one imported first (libgomp reads it once, when llama.cpp's library loads).
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")}
    out = subprocess.run(
        [sys.executable, "-m", "bench.b16_prefill", "--eval"],
        input=text,
        env=env,
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
    evaluated by a plain llama_cpp.Llama with the settings the engine reads a prompt with
    (llama_native.open_context, llama_batch.py): n_batch = n_ubatch 512, flash attention
    off, f16 KV cache, every core."""
    from lmsp_desktop.core.engines.llama import LlamaEngine
    from lmsp_desktop.core.engines.llama_native import kv_ggml_type

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
        n_ubatch=512,
        flash_attn=False,
        type_k=kv_ggml_type("f16"),
        type_v=kv_ggml_type("f16"),
        n_threads=cores,
        n_threads_batch=cores,
        verbose=False,
    )
    start = time.perf_counter()
    llama.eval(tokens)
    took = time.perf_counter() - start
    llama.close()
    print(json.dumps({"tokens": len(tokens), "seconds": took}))


async def _pair(
    server: BenchServer, session: aiohttp.ClientSession, text: str, service_first: bool
) -> tuple[float, int, float]:
    """(the service's time to first token, the tokens, Llama.eval's seconds) for `text`."""
    if service_first:
        ttft = await first_token(server, text, session)
    tokens, took = await asyncio.to_thread(llama_eval, text)
    if not service_first:
        ttft = await first_token(server, text, session)
    return ttft, tokens, took


async def _measure(work: Path, sizes: tuple[int, ...], repeats: int) -> dict[str, Any]:
    found: dict[str, Any] = {"ttft": {}, "eval": {}, "tokens": {}, "beside": []}
    with BenchServer(
        work / "b16", "--engine", "llama", "--demo", "--max-context", str(CONTEXT)
    ) as server:
        server.start()
        timeout = aiohttp.ClientTimeout(total=3600)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await first_token(server, notes(3, 0), session)  # loads the model
            run = 1  # each prompt its own first tokens: none reuses another's cached prefix
            for repeat in range(repeats):
                for size in sizes:  # interleaved: slow phases of the machine hit both
                    ttft, tokens, took = await _pair(
                        server, session, notes_for(size, run), service_first=repeat % 2 == 0
                    )
                    run += 1
                    found["ttft"].setdefault(size, []).append(ttft)
                    found["eval"].setdefault(size, []).append(took)
                    found["tokens"][size] = tokens
        window = 1.0 if repeats == 1 else 5.0
        for repeat in range(repeats):
            text = notes_for(sizes[0], 900 + repeat)
            if repeat % 2:
                tokens, took = await asyncio.to_thread(llama_eval, text)
            before, during, ttft = await neighbours(server, text, window)
            if not repeat % 2:
                tokens, took = await asyncio.to_thread(llama_eval, text)
            found["beside"].append((before, during, ttft, tokens, took))
    return found


def run(work: Path, quick: bool) -> list[Row]:
    sizes, repeats = ((300,), 1) if quick else (SIZES, 2)
    # (quick: one repeat, and a 1 s window before the prompt instead of 5 s)
    found = asyncio.run(_measure(work, sizes, repeats))
    cores = os.cpu_count()
    load = f"load {os.getloadavg()[0]:.1f}"
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
                f"(n_batch 512, {cores} threads); {load}",
            )
        )
    beside = found["beside"]
    ttft = min(b[2] for b in beside)
    took = min(b[4] for b in beside)
    tokens = beside[0][3]
    rows.append(
        Row(
            "B16",
            f"time to first token beside 2 running streams, {tokens:,}-token prompt",
            ttft,
            "s",
            "≥ 0.9×",
            took / ttft,
            "Llama.eval",
            took >= 0.9 * ttft,
            note=f"best of {repeats}; Llama.eval of the same tokens {took:.2f} s (alone); "
            f"first tokens after {', '.join(f'{b[2]:.2f}' for b in beside)} s; {load}",
        )
    )
    # The streams must keep streaming while the prompt is read: the slowest run counts.
    before, during = min(((b[0], b[1]) for b in beside), key=lambda pair: pair[1])
    rows.append(
        Row(
            "B16",
            f"2 running streams while a {sizes[0]}-token prompt is read",
            during,
            "tok/s",
            "> 0",
            during / before if before else None,
            "their rate before",
            during > 0,
            note=f"the slowest of {repeats}; {before:.1f} tok/s before it arrived",
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
