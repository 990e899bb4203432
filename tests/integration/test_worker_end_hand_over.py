"""An engine worker's last tokens come with its end (B2): they ride inside its `done`
message, so the runner gets them together with the result and commits them with the task's
finish. A real worker process with the demo model cut to 4 blocks (nothing here depends on
the model's tokens)."""

from __future__ import annotations

from lmsp_desktop.core.engines.base import (
    EndingSink,
    GenerationRequest,
    GenerationResult,
    TokenPiece,
)
from lmsp_desktop.core.engines.worker import WorkerEngine
from tests.support.cut_model import cut_demo_model

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
TOKENS = 8


async def test_the_workers_last_tokens_come_with_its_result() -> None:
    model = await WorkerEngine(n_threads=1).load(cut_demo_model())
    try:
        each: list[list[TokenPiece]] = []
        ends: list[tuple[list[TokenPiece], GenerationResult]] = []

        async def sink(pieces: list[TokenPiece]) -> bool:
            each.append(pieces)
            return True

        async def last(pieces: list[TokenPiece], result: GenerationResult) -> bool:
            ends.append((pieces, result))
            return True

        # An hour between hand-overs: the first token goes alone (never held back), the
        # others wait for the end, which cuts the wait short.
        request = GenerationRequest(
            PROMPT, max_output_tokens=TOKENS, temperature=0, sink_interval=3600.0
        )
        result = await model.generate(request, EndingSink(sink, last))
    finally:
        await model.unload()
    assert result.finish_reason == "length"
    assert result.output_tokens == TOKENS
    assert len(ends) == 1
    pieces, told = ends[0]
    assert told == result
    # Every token handed over once, and those after the first with the end itself.
    assert sum(map(len, each)) + len(pieces) == TOKENS
    assert len(pieces) == TOKENS - 1, [len(batch) for batch in each]
