"""B12 grammar-constrained decoding: tokens/s under a JSON-schema grammar against free
decoding of the same prompt, on the demo model in this process (the engine's own per-token
path; the grammar checks the sampled token first and masks the vocabulary only when that
token is rejected)."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench.common import demo_model
from bench.report import Row

PROMPT = (
    "Write a long, detailed story about a lighthouse keeper who lives through a storm. "
    'Answer as JSON: {"title": ..., "story": ...}.'
)
SCHEMA = {
    "type": "object",
    # A long story is required, so both runs decode the same number of tokens.
    "properties": {"title": {"type": "string"}, "story": {"type": "string", "minLength": 2000}},
    "required": ["title", "story"],
    "additionalProperties": False,
}


Rates = dict[str, list[float]]


async def _rates(tokens: int, rounds: int) -> tuple[Rates, Rates, int, int]:
    from lmsp_desktop.core.engines.base import GenerationRequest, TokenPiece
    from lmsp_desktop.core.engines.llama import LlamaEngine
    from lmsp_desktop.core.tools.schema import schema_grammar

    # One thread, as the engine tests: on a busy 2-core machine two spinning llama.cpp
    # threads are several times slower than one, which would swamp the comparison.
    model = await LlamaEngine(n_threads=1).load(demo_model())
    grammar = schema_grammar(SCHEMA)
    messages = [{"role": "user", "content": PROMPT}]
    # Wall-clock and CPU-time rates: the machine is shared, and other load swings wall-clock
    # rates by tens of percent between runs; the process's CPU time per token does not.
    free: Rates = {"wall": [], "cpu": []}
    constrained: Rates = {"wall": [], "cpu": []}
    counts = [0, 0]
    try:
        for i in range(rounds * 2 + 1):
            times: list[float] = []
            cpu: list[float] = []

            async def sink(
                batch: list[TokenPiece], times: list[float] = times, cpu: list[float] = cpu
            ) -> bool:
                now, used = time.perf_counter(), time.process_time()
                times.extend(now for _ in batch)
                cpu.extend(used for _ in batch)
                return True

            use = None if i % 2 else grammar
            request = GenerationRequest(
                messages, max_output_tokens=tokens, temperature=0.0, grammar=use
            )
            await model.generate(request, sink)
            if i == 0 or len(times) < 2:
                continue  # the first run warms the model up
            rates = constrained if use else free
            rates["wall"].append((len(times) - 1) / (times[-1] - times[0]))
            rates["cpu"].append((len(cpu) - 1) / max(cpu[-1] - cpu[0], 1e-9))
            counts[bool(use)] = len(times)
    finally:
        await model.unload()
    return free, constrained, counts[0], counts[1]


def run(work: Path, quick: bool) -> list[Row]:
    del work
    tokens, rounds = (32, 1) if quick else (160, 5)
    free, constrained, n_free, n_constrained = asyncio.run(_rates(tokens, rounds))
    wall = statistics.median(constrained["wall"]) / statistics.median(free["wall"])
    cpu_free, cpu_constrained = (
        statistics.median(free["cpu"]),
        statistics.median(constrained["cpu"]),
    )
    ratio = cpu_constrained / cpu_free
    return [
        Row(
            "B12",
            f"free decoding, demo model ({n_free} tokens)",
            statistics.median(free["wall"]),
            "tok/s",
            note=f"{cpu_free:.1f} tokens per CPU-second",
        ),
        Row(
            "B12",
            f"decoding under a JSON-schema grammar ({n_constrained} tokens)",
            statistics.median(constrained["wall"]),
            "tok/s",
            "≥ 0.9× free",
            ratio,
            "free decoding (CPU time)",
            ratio >= 0.9,
            note=f"{cpu_constrained:.1f} tokens per CPU-second; wall-clock ratio {wall:.2f}×; "
            f"median of {rounds} alternating runs each",
        ),
    ]
