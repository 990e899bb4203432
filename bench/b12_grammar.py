"""B12 grammar-constrained decoding: tokens/s under a JSON-schema grammar, and under the
grammar `auto` tool choice runs with (free text that takes hold at a tool-call opening),
against free decoding of the same prompt, on the demo model in this process (the engine's
own per-token path; the grammar checks the sampled token first and masks the vocabulary
only when that token is rejected)."""

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


TOOL = {
    "name": "save_story",
    "description": "Save a story",
    "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
    "strict": False,
}

Rates = dict[str, list[float]]
VARIANTS = ("free", "schema", "auto")


async def _rates(tokens: int, rounds: int) -> tuple[dict[str, Rates], dict[str, int]]:
    from lmsp_desktop.core.engines.base import GenerationRequest, TokenPiece
    from lmsp_desktop.core.engines.llama import LlamaEngine
    from lmsp_desktop.core.tools.grammars import output_grammar
    from lmsp_desktop.core.tools.schema import schema_grammar

    # One thread, as the engine tests: on a busy 2-core machine two spinning llama.cpp
    # threads are several times slower than one, which would swamp the comparison.
    model = await LlamaEngine(n_threads=1).load(demo_model())
    grammars = {
        "free": None,
        "schema": schema_grammar(SCHEMA),
        "auto": output_grammar({"tools": [TOOL], "tool_choice": "auto"}),
    }
    messages = [{"role": "user", "content": PROMPT}]
    # Wall-clock and CPU-time rates: the machine is shared, and other load swings wall-clock
    # rates by tens of percent between runs; the process's CPU time per token does not.
    rates: dict[str, Rates] = {name: {"wall": [], "cpu": []} for name in VARIANTS}
    counts = dict.fromkeys(VARIANTS, 0)
    try:
        for i in range(rounds * len(VARIANTS) + 1):
            times: list[float] = []
            cpu: list[float] = []

            async def sink(
                batch: list[TokenPiece], times: list[float] = times, cpu: list[float] = cpu
            ) -> bool:
                now, used = time.perf_counter(), time.process_time()
                times.extend(now for _ in batch)
                cpu.extend(used for _ in batch)
                return True

            name = VARIANTS[i % len(VARIANTS)]
            request = GenerationRequest(
                messages, max_output_tokens=tokens, temperature=0.0, grammar=grammars[name]
            )
            await model.generate(request, sink)
            if i == 0 or len(times) < 2:
                continue  # the first run warms the model up
            rates[name]["wall"].append((len(times) - 1) / (times[-1] - times[0]))
            rates[name]["cpu"].append((len(cpu) - 1) / max(cpu[-1] - cpu[0], 1e-9))
            counts[name] = len(times)
    finally:
        await model.unload()
    return rates, counts


def run(work: Path, quick: bool) -> list[Row]:
    del work
    tokens, rounds = (32, 1) if quick else (160, 5)
    rates, counts = asyncio.run(_rates(tokens, rounds))
    median = {name: {k: statistics.median(v) for k, v in rates[name].items()} for name in rates}
    free = median["free"]
    rows = [
        Row(
            "B12",
            f"free decoding, demo model ({counts['free']} tokens)",
            free["wall"],
            "tok/s",
            note=f"{free['cpu']:.1f} tokens per CPU-second",
        )
    ]
    labels = {
        "schema": "decoding under a JSON-schema grammar",
        "auto": "decoding under the auto tool-choice grammar (text until a call)",
    }
    for name, label in labels.items():
        ratio = median[name]["cpu"] / free["cpu"]
        rows.append(
            Row(
                "B12",
                f"{label} ({counts[name]} tokens)",
                median[name]["wall"],
                "tok/s",
                "≥ 0.9× free",
                ratio,
                "free decoding (CPU time)",
                ratio >= 0.9,
                note=f"{median[name]['cpu']:.1f} tokens per CPU-second; wall-clock ratio "
                f"{median[name]['wall'] / free['wall']:.2f}×; median of {rounds} interleaved "
                "runs each",
            )
        )
    return rows
