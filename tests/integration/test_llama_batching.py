"""One loaded demo model serving several generations at once: shared decodes give each
sequence exactly its solo output, the prefix cache reuses a previous turn, cancel and long
prompts do not disturb the other streams, and resume stays exact inside a shared batch."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from lmsp_desktop.core.engines.base import GenerationRequest, TokenPiece
from lmsp_desktop.core.engines.llama import LlamaEngine, LlamaModel
from lmsp_desktop.core.engines.llama_batch import SHARED_CHUNK
from lmsp_desktop.core.engines.pump import TokenChannel
from lmsp_desktop.core.models.demo import demo_model_path
from tests.support.cut_model import cut_demo_model
from tests.support.polling import until

THREADS = 1
PROMPTS = [
    [{"role": "user", "content": "Write a long story about a dragon."}],
    [{"role": "user", "content": "Explain how tides work."}],
    [{"role": "user", "content": "List ten fruits and their colours."}],
    [{"role": "user", "content": "Write a poem about the sea."}],
]


class Collector:
    def __init__(self) -> None:
        self.pieces: list[TokenPiece] = []
        self._grew = asyncio.Condition()

    async def __call__(self, batch: list[TokenPiece]) -> bool:
        self.pieces.extend(batch)
        async with self._grew:
            self._grew.notify_all()
        return True

    async def wait_for(self, count: int) -> None:
        async with self._grew:
            await self._grew.wait_for(lambda: len(self.pieces) >= count)

    @property
    def ids(self) -> list[int]:
        return [p.token_id for p in self.pieces]

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.pieces)


class Emitted:
    """Every token in the order the decoding thread sampled it, each with the number of
    prompt chunks the model had read by then. What a stream got while a prompt was read is
    counted here, not in its sink: a sink is handed its tokens by the event loop, which on
    a loaded machine can hand the prompt's first token over before the stream's last few."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, model: LlamaModel) -> None:
        self.log: list[tuple[TokenChannel, int]] = []
        self._decoders = model._all_decoders
        append = TokenChannel._append

        def recording(channel: TokenChannel, piece: TokenPiece) -> object:
            self.log.append((channel, self.chunks()))
            return append(channel, piece)

        monkeypatch.setattr(TokenChannel, "_append", recording)

    def chunks(self) -> int:
        """Prompt chunks the model has read so far (on every core)."""
        return sum(d.wide_chunks for d in self._decoders)

    def between_chunks(self, since: int) -> list[int]:
        """For each generation in the order of their first tokens, the tokens it got after
        the first prompt chunk read past `since` and before the first token of the last
        generation to start (the prompt's reader)."""
        channels = list(dict.fromkeys(channel for channel, _ in self.log))
        reader = channels[-1]
        read = next(chunks for channel, chunks in self.log if channel is reader)
        return [
            sum(1 for ch, chunks in self.log if ch is channel and since < chunks < read)
            for channel in channels[:-1]
        ]


@contextlib.asynccontextmanager
async def admitted_together(model: LlamaModel, count: int) -> AsyncIterator[None]:
    """The generations started inside join the (one-context) model's batch at the same
    step: its decoding thread waits while they are submitted. Each tokenizes its prompt in
    a thread first, so on a loaded machine the first would otherwise decode alone for many
    steps before the next came."""
    (decoder,) = model._all_decoders
    with decoder._wake:  # the thread takes its arrivals under this (re-entrant) lock
        yield
        await until(lambda: len(decoder._waiting) >= count, what="the submitted generations")


# The tests share one loaded model (one load, one exactness probe), so they share its loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def model() -> AsyncIterator[LlamaModel]:
    """One context holding all four sequences: every test here exercises shared decodes.
    Shared by the module's tests: each compares runs it makes itself (its figures are
    differences), and a test that needs an empty prefix cache loads a model of its own."""
    path = demo_model_path()
    assert path is not None
    loaded = await LlamaEngine(n_threads=THREADS, n_ctx=2048, parallel=4, contexts=1).load(
        Path(path)
    )
    try:
        yield loaded
    finally:
        await loaded.unload()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def verdict(model: LlamaModel) -> bool:
    """The module model's exactness verdict, given to the tests' other loads of the demo
    model (other n_ctx, parallel and contexts): the probe measures the file's numerics on
    this machine's cores, ~0.8 CPU-s each load (160 prompt tokens read twice), and the
    first test asserts its verdict. A load with exact=None would probe again."""
    return await asyncio.to_thread(lambda: model.exact_batching)


def request(messages: list[dict[str, str]], **kw: object) -> GenerationRequest:
    args: dict[str, object] = {"max_output_tokens": 24, "temperature": 0}
    args.update(kw)
    return GenerationRequest(messages, **args)  # type: ignore[arg-type]


async def solo(model: LlamaModel, req: GenerationRequest) -> list[int]:
    sink = Collector()
    await model.generate(req, sink)
    return sink.ids


async def test_the_demo_model_passes_the_exactness_probe(model: LlamaModel) -> None:
    # Measured property of this CPU backend and model; the rest of this file relies on it.
    assert model.exact_batching
    assert model.parallel == 4


async def test_shared_decodes_give_each_sequence_its_solo_tokens(model: LlamaModel) -> None:
    greedy = [request(p) for p in PROMPTS]
    seeded = [request(p, temperature=0.9, top_p=0.9, seed=40 + i) for i, p in enumerate(PROMPTS)]
    for requests in (greedy, seeded):
        alone = [await solo(model, r) for r in requests]
        sinks = [Collector() for _ in requests]
        fresh = [
            GenerationRequest(
                r.messages,
                max_output_tokens=r.max_output_tokens,
                temperature=r.temperature,
                top_p=r.top_p,
                seed=r.seed,
            )
            for r in requests
        ]
        decodes_before = model.decodes
        async with admitted_together(model, len(fresh)):
            running = [
                asyncio.create_task(model.generate(r, s)) for r, s in zip(fresh, sinks, strict=True)
            ]
        await asyncio.gather(*running)
        together = [s.ids for s in sinks]
        assert together == alone
        # They really shared decodes: far fewer llama_decode calls than tokens (counting the
        # loop's turns instead let one decode per sequence per turn pass).
        decodes = model.decodes - decodes_before
        assert decodes < sum(len(t) for t in together), decodes


async def test_a_generation_joining_midway_changes_nobody(model: LlamaModel) -> None:
    alone = [await solo(model, request(p, max_output_tokens=30)) for p in PROMPTS[:2]]
    first, second = Collector(), Collector()
    running = asyncio.create_task(model.generate(request(PROMPTS[0], max_output_tokens=30), first))
    await first.wait_for(5)
    await model.generate(request(PROMPTS[1], max_output_tokens=30), second)
    await running
    assert [first.ids, second.ids] == alone


async def test_the_next_turn_reuses_the_cached_conversation_exactly(
    model: LlamaModel, verdict: bool
) -> None:
    system = {"role": "system", "content": "You are a careful assistant. " * 8}
    turn1 = [system, {"role": "user", "content": "Name a large animal."}]
    first = Collector()
    await model.generate(request(turn1), first)
    turn2 = [
        *turn1,
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And a small one?"},
    ]
    before = model.prefix_stats.tokens_reused
    hits = model.prefix_stats.hits
    cached = Collector()
    result = await model.generate(request(turn2), cached)
    reused = model.prefix_stats.tokens_reused - before
    assert model.prefix_stats.hits == hits + 1
    assert reused >= len(model.tokenize_prompt(model.render_prompt(turn1))) - 1
    assert reused < result.input_tokens
    # A model with an empty cache gives the very same answer (exact reuse).
    path = demo_model_path()
    assert path is not None
    other = await LlamaEngine(n_threads=THREADS, n_ctx=1024, parallel=1).load(
        Path(path), exact=verdict
    )
    try:
        assert await solo(other, request(turn2)) == cached.ids
        assert other.prefix_stats.tokens_reused == 0
    finally:
        await other.unload()


async def test_cancel_stops_one_stream_within_a_token_and_not_the_others(
    model: LlamaModel,
) -> None:
    reference = await solo(model, request(PROMPTS[1], max_output_tokens=40))
    victim_request = request(PROMPTS[0], max_output_tokens=200)
    victim, other = Collector(), Collector()
    seen_at_cancel: list[int] = []

    async def cancelling(batch: list[TokenPiece]) -> bool:
        await victim(batch)
        if len(victim.pieces) >= 4 and not victim_request.cancel.is_set():
            victim_request.cancel.set()
            seen_at_cancel.append(len(victim.pieces))
        return True

    cancelled, finished = await asyncio.gather(
        model.generate(victim_request, cancelling),
        model.generate(request(PROMPTS[1], max_output_tokens=40), other),
    )
    assert cancelled.finish_reason == "cancelled"
    # At most the token already being decoded when the cancel landed comes after it.
    assert len(victim.pieces) <= seen_at_cancel[0] + 1
    assert finished.finish_reason in ("length", "stop")
    assert other.ids == reference


async def test_a_long_prompt_does_not_stall_a_running_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the demo model cut to 4 blocks (tests/support/cut_model.py): the claim is when the
    stream gets its tokens while the prompt is read, not which tokens (nothing here is
    compared with a solo run), and the ~1,000-token prompt read beside the stream was the
    test's cost."""
    model = await LlamaEngine(n_threads=THREADS, n_ctx=2048, parallel=4, contexts=1).load(
        cut_demo_model()
    )
    try:
        await _a_long_prompt_does_not_stall_a_running_stream(model, monkeypatch)
    finally:
        await model.unload()


async def _a_long_prompt_does_not_stall_a_running_stream(
    model: LlamaModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    emitted = Emitted(monkeypatch, model)
    stream = Collector()
    # Stopped once the prompt is read: its length is only room to keep streaming meanwhile.
    stream_request = request(PROMPTS[0], max_output_tokens=400)
    running = asyncio.create_task(model.generate(stream_request, stream))
    await stream.wait_for(3)
    long_prompt = [{"role": "user", "content": "Summarise this. " + "The tide rises. " * 240}]
    since = emitted.chunks()
    result = await model.generate(request(long_prompt, max_output_tokens=2), Collector())
    stream_request.cancel.set()
    assert (await running).finish_reason == "cancelled"  # it was still streaming
    assert result.input_tokens > 4 * SHARED_CHUNK  # several prompt chunks
    # The running stream kept getting tokens while the long prompt was being read: one
    # between each two of its chunks (none if they were read back to back).
    assert emitted.between_chunks(since)[0] >= 3


async def test_resume_inside_a_shared_batch_is_exact(model: LlamaModel) -> None:
    full = Collector()
    await model.generate(request(PROMPTS[0], max_output_tokens=32, temperature=0.8, seed=9), full)
    for cut in (3, 17):
        resumed, noise = Collector(), Collector()
        await asyncio.gather(
            model.generate(
                request(
                    PROMPTS[0],
                    max_output_tokens=32,
                    temperature=0.8,
                    seed=9,
                    resume_tokens=full.ids[:cut],
                ),
                resumed,
            ),
            model.generate(request(PROMPTS[2], max_output_tokens=32), noise),
            model.generate(request(PROMPTS[3], max_output_tokens=8), Collector()),
        )
        assert full.ids[:cut] + resumed.ids == full.ids
        assert resumed.pieces == full.pieces[cut:]


async def test_a_long_prompt_gives_the_same_tokens_however_it_was_read(
    model: LlamaModel, verdict: bool
) -> None:
    """A prompt longer than one decode (n_batch) read alone, in large chunks on every core,
    gives the tokens it gives when read in small chunks beside a generating stream, and a
    resumed run (prompt in chunks, output replayed one token at a time) continues it."""
    # 542 tokens with the chat template: just over one decode (each token read costs CPU).
    text = " ".join(
        f"Note {i}: the lamp at mile {i * 7 % 13} burned until dawn." for i in range(34)
    )
    long_prompt = [{"role": "user", "content": text + " Summarise the notes."}]
    alone = Collector()
    first = await model.generate(request(long_prompt, max_output_tokens=20), alone)
    assert first.input_tokens > 512  # more than one decode's worth
    # Read again while another sequence generates: SHARED_CHUNK pieces, other numerics paths
    # would show here. The prefix cache must not make it trivial: a fresh model.
    path = demo_model_path()
    assert path is not None
    other = await LlamaEngine(n_threads=THREADS, n_ctx=2048, parallel=2, contexts=1).load(
        Path(path), exact=verdict
    )
    try:
        stream = Collector()
        stream_request = request(PROMPTS[0], max_output_tokens=80)
        running = asyncio.create_task(other.generate(stream_request, stream))
        await stream.wait_for(2)
        beside = Collector()
        steps = other.steps
        await other.generate(request(long_prompt, max_output_tokens=20), beside)
        assert other.steps - steps > first.input_tokens // SHARED_CHUNK  # small chunks
        stream_request.cancel.set()  # it was only there to make the chunks small
        await running
        assert beside.ids == alone.ids
        for cut in (1, 9):
            resumed = Collector()
            await other.generate(
                request(long_prompt, max_output_tokens=20, resume_tokens=alone.ids[:cut]),
                resumed,
            )
            assert alone.ids[:cut] + resumed.ids == alone.ids
    finally:
        await other.unload()


async def test_resuming_a_run_that_filled_the_context_ends_there_too(verdict: bool) -> None:
    path = demo_model_path()
    assert path is not None
    small = await LlamaEngine(n_threads=THREADS, n_ctx=64, parallel=2).load(
        Path(path), exact=verdict
    )
    try:
        full = Collector()
        first = await small.generate(request(PROMPTS[0], max_output_tokens=None), full)
        assert first.finish_reason == "context"
        for cut in (len(full.ids) - 3, len(full.ids)):
            resumed = Collector()
            again = await small.generate(
                request(PROMPTS[0], max_output_tokens=None, resume_tokens=full.ids[:cut]),
                resumed,
            )
            assert again.finish_reason == "context"
            assert full.ids[:cut] + resumed.ids == full.ids
            assert again.output_tokens == first.output_tokens
    finally:
        await small.unload()


async def test_two_contexts_share_the_weights_and_the_prefix_cache(verdict: bool) -> None:
    path = demo_model_path()
    assert path is not None
    model = await LlamaEngine(n_threads=THREADS, n_ctx=1024, parallel=4, contexts=2).load(
        Path(path), exact=verdict
    )
    try:
        assert model.parallel == 4 and len(model._contexts) == 2
        alone = [await solo(model, request(p)) for p in PROMPTS]
        sinks = [Collector() for _ in PROMPTS]
        pairs = zip(PROMPTS, sinks, strict=True)
        await asyncio.gather(*(model.generate(request(p), s) for p, s in pairs))
        assert [s.ids for s in sinks] == alone
        # Each context ran some of them: both decoded.
        assert all(d.steps > 0 for d in model._all_decoders)
        hits = model.prefix_stats.hits
        system = {"role": "system", "content": "You are a careful assistant. " * 8}
        first = Collector()
        await model.generate(request([system, PROMPTS[0][0]]), first)
        again = Collector()
        await model.generate(request([system, PROMPTS[1][0]]), again)
        assert model.prefix_stats.hits == hits + 1  # found in whichever context held it
    finally:
        await model.unload()


async def test_a_long_prompt_takes_every_core_and_both_contexts_streams_keep_streaming(
    monkeypatch: pytest.MonkeyPatch, verdict: bool
) -> None:
    """B16's third row: two streams run, one in each of the model's two contexts, and a long
    prompt joins one of them. Its chunks are read on every core while the other context
    waits (prompt priority); between two chunks both streams get a token; nobody's tokens
    change for it."""
    path = demo_model_path()
    assert path is not None
    # About 680 tokens: six chunks, five gaps between them.
    notes = (f"Note {i}: the lamp at mile {i * 7 % 13} burned until dawn." for i in range(45))
    long_prompt = [{"role": "user", "content": " ".join(notes) + " Summarise the notes."}]

    async def load() -> LlamaModel:
        engine = LlamaEngine(n_threads=THREADS, n_ctx=2048, parallel=4, contexts=2)
        return await engine.load(Path(path), exact=verdict)

    model = await load()
    try:
        prompt_alone = await solo(model, request(long_prompt, max_output_tokens=6))
    finally:
        await model.unload()
    # Nothing of the prompt in its prefix cache.
    model = await load()
    emitted = Emitted(monkeypatch, model)
    try:
        # Stopped once the prompt is read: their length is only room to keep streaming
        # meanwhile (run to 120 tokens, here and alone, they were half the test's CPU).
        stream_requests = [request(p, max_output_tokens=400) for p in PROMPTS[:2]]
        streams = [Collector(), Collector()]
        running = [
            asyncio.create_task(model.generate(r, s))
            for r, s in zip(stream_requests, streams, strict=True)
        ]
        for stream in streams:
            await stream.wait_for(3)
        assert all(d.active == 1 for d in model._all_decoders)  # one stream in each context
        since = emitted.chunks()
        reader = Collector()
        result = await model.generate(request(long_prompt, max_output_tokens=6), reader)
        for stream_request in stream_requests:
            stream_request.cancel.set()
        await asyncio.gather(*running)
        assert result.cached_tokens == 0
        # Every chunk of the prompt was read on every core, although both contexts had a
        # running stream (before: one core, the other context's stream kept its own).
        chunks = emitted.chunks() - since
        assert chunks >= result.input_tokens // SHARED_CHUNK, (chunks, result.input_tokens)
        # Both streams kept streaming while it was read: a token between each two chunks.
        between = emitted.between_chunks(since)
        assert len(between) == 2 and min(between) >= 3, between
        assert reader.ids == prompt_alone
    finally:
        await model.unload()
    # Each stream's tokens are its solo run's, as far as it went (a fresh load again).
    model = await load()
    try:
        alone = [
            await solo(model, request(p, max_output_tokens=len(s.ids)))
            for p, s in zip(PROMPTS[:2], streams, strict=True)
        ]
    finally:
        await model.unload()
    assert [s.ids for s in streams] == alone


async def test_a_neighbour_cancelled_during_a_prompt_chunk_leaves_without_waiting_for_it(
    model: LlamaModel, verdict: bool
) -> None:
    """A stream shares its context with a long prompt and is cancelled while a chunk of the
    prompt is being read (seconds on a busy machine): llama.cpp's abort callback stops the
    chunk for a cancel of any sequence of the context, the stream leaves at once, and the
    chunk is read again; the prompt's tokens do not change for it."""
    # About 480 tokens, several chunks beside a stream: the one cut short is the first, the
    # rest is read after the stream left. (It was 60 notes, ~970 tokens, read twice: the
    # test's cost, for nothing the claim needs.)
    notes = (f"Note {i}: the lamp at mile {i * 7 % 13} burned until dawn." for i in range(30))
    long_prompt = [{"role": "user", "content": " ".join(notes) + " Summarise the notes."}]
    stream_request = request(PROMPTS[0], max_output_tokens=200)
    stream = Collector()
    running = asyncio.create_task(model.generate(stream_request, stream))
    await stream.wait_for(3)
    decoder = model._all_decoders[0]
    asked = [0]
    checks = decoder._interrupted

    def cancelling_mid_chunk() -> bool:
        # llama.cpp asks between two operations of the chunk's graph (hundreds a chunk):
        # the 50th question comes in the middle of the prompt's first chunk.
        asked[0] += 1
        if asked[0] == 50:
            stream_request.cancel.set()
        return checks()

    aborted = decoder.aborted_chunks  # (the module's model: count this test's own)
    decoder._interrupted = cancelling_mid_chunk  # type: ignore[method-assign]
    reader = Collector()
    prompt_tokens_when_stream_ended: list[int] = []
    running.add_done_callback(lambda _t: prompt_tokens_when_stream_ended.append(len(reader.ids)))
    try:
        result = await model.generate(request(long_prompt, max_output_tokens=6), reader)
        cancelled = await running
    finally:
        del decoder._interrupted  # the shared model's own check again
    assert cancelled.finish_reason == "cancelled"
    assert decoder.aborted_chunks - aborted == 1  # the chunk stopped for the neighbour's cancel
    assert prompt_tokens_when_stream_ended == [0]
    assert result.finish_reason in {"length", "stop"}
    path = demo_model_path()
    assert path is not None
    fresh = await LlamaEngine(n_threads=THREADS, n_ctx=2048, parallel=1, contexts=1).load(
        Path(path), exact=verdict
    )
    try:
        assert await solo(fresh, request(long_prompt, max_output_tokens=6)) == reader.ids
    finally:
        await fresh.unload()
