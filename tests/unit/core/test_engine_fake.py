"""The fake engine keeps the engine contract the runner relies on (batching, cancel, resume)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from lmsp_desktop.core.engines.base import EngineError, GenerationRequest, TokenPiece
from lmsp_desktop.core.engines.fake import DEFAULT_TOKENS, FakeEngine, token_ids

MESSAGES = [{"role": "user", "content": "Say hello."}]


class Collector:
    """A sink that records batches; optionally slow, optionally refusing after n tokens."""

    def __init__(self, delay: float = 0.0, refuse_after: int | None = None) -> None:
        self.batches: list[list[TokenPiece]] = []
        self.delay = delay
        self.refuse_after = refuse_after

    @property
    def pieces(self) -> list[TokenPiece]:
        return [p for batch in self.batches for p in batch]

    async def __call__(self, batch: list[TokenPiece]) -> bool:
        self.batches.append(batch)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.refuse_after is None or len(self.pieces) < self.refuse_after


async def test_generates_the_script_and_stops() -> None:
    model = await FakeEngine().load(Path("fake.gguf"))
    sink = Collector()
    result = await model.generate(GenerationRequest(MESSAGES, seed=5), sink)
    assert "".join(p.text for p in sink.pieces) == "".join(DEFAULT_TOKENS)
    assert [p.token_id for p in sink.pieces] == token_ids(DEFAULT_TOKENS)
    assert result.finish_reason == "stop"
    assert result.output_tokens == len(DEFAULT_TOKENS)
    assert result.seed_used == 5


async def test_seed_is_chosen_and_reported_when_missing() -> None:
    model = await FakeEngine().load(Path("fake.gguf"))
    result = await model.generate(GenerationRequest(MESSAGES), Collector())
    assert isinstance(result.seed_used, int)


async def test_max_output_tokens_gives_length_with_exactly_that_many_tokens() -> None:
    model = await FakeEngine().load(Path("fake.gguf"))
    sink = Collector()
    result = await model.generate(GenerationRequest(MESSAGES, max_output_tokens=3), sink)
    assert result.finish_reason == "length"
    assert len(sink.pieces) == 3 == result.output_tokens


async def test_slow_sink_gets_accumulated_tokens_in_one_batch() -> None:
    engine = FakeEngine(tokens=[f"t{i}" for i in range(20)], token_delay=0.002)
    model = await engine.load(Path("fake.gguf"))
    sink = Collector(delay=0.03)
    result = await model.generate(GenerationRequest(MESSAGES), sink)
    assert result.finish_reason == "stop"
    assert len(sink.pieces) == 20
    assert len(sink.batches) < 20  # group commit: later batches hold several tokens
    assert max(len(b) for b in sink.batches) > 1


async def test_sink_refusal_stops_within_one_token() -> None:
    engine = FakeEngine(tokens=[f"t{i}" for i in range(50)], token_delay=0.001)
    model = await engine.load(Path("fake.gguf"))
    # A slow sink: tokens pile up while it works, and must not be delivered after it refuses.
    sink = Collector(delay=0.02, refuse_after=3)
    result = await model.generate(GenerationRequest(MESSAGES), sink)
    assert result.finish_reason == "cancelled"
    # The batch that reached 3 tokens was the last one the sink saw: nothing after it.
    assert sum(len(b) for b in sink.batches[:-1]) < 3 <= len(sink.pieces)
    # Nothing is delivered after the refusal, and the count is what the sink accepted.
    assert result.output_tokens == len(sink.pieces) < 50


async def test_cancel_event_stops_a_running_generation() -> None:
    """At most one token after the cancel, whatever the load: the tokens are let through one
    by one (the gate), so how many the thread made before the cancel never depends on how
    late the loop ran (with free-running tokens a loaded loop handed 8 at once)."""
    engine = FakeEngine(tokens=[f"t{i}" for i in range(1000)])
    engine.gate = threading.Semaphore(0)
    model = await engine.load(Path("fake.gguf"))
    request = GenerationRequest(MESSAGES)
    seen = Collector()
    generating = asyncio.create_task(model.generate(request, seen))
    engine.gate.release(5)
    for _ in range(2000):
        if len(seen.pieces) == 5:
            break
        await asyncio.sleep(0.005)
    request.cancel.set()
    engine.gate.release(10)  # tokens it may take: it must not
    result = await generating
    assert result.finish_reason == "cancelled"
    assert 5 <= len(seen.pieces) <= 6


async def test_gate_steps_tokens_one_at_a_time() -> None:
    engine = FakeEngine()
    engine.gate = threading.Semaphore(0)
    model = await engine.load(Path("fake.gguf"))
    sink = Collector()
    task = asyncio.create_task(model.generate(GenerationRequest(MESSAGES), sink))
    engine.gate.release(2)
    for _ in range(400):
        if len(sink.pieces) >= 2:
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    assert len(sink.pieces) == 2
    request = engine.requests[-1]
    request.cancel.set()
    result = await task
    assert result.finish_reason == "cancelled"
    assert result.output_tokens == 2


async def test_resume_continues_after_the_replayed_tokens() -> None:
    model = await FakeEngine().load(Path("fake.gguf"))
    ids = token_ids(DEFAULT_TOKENS)
    sink = Collector()
    result = await model.generate(GenerationRequest(MESSAGES, resume_tokens=ids[:3]), sink)
    assert "".join(p.text for p in sink.pieces) == "".join(DEFAULT_TOKENS[3:])
    assert result.output_tokens == len(DEFAULT_TOKENS)
    assert result.finish_reason == "stop"


async def test_resume_with_foreign_tokens_is_an_error() -> None:
    model = await FakeEngine().load(Path("fake.gguf"))
    with pytest.raises(EngineError) as info:
        await model.generate(GenerationRequest(MESSAGES, resume_tokens=[1, 2]), Collector())
    assert info.value.code == "resume_mismatch"


async def test_failure_at_a_position_raises_engine_error_after_earlier_tokens() -> None:
    engine = FakeEngine(fail_at=2)
    model = await engine.load(Path("fake.gguf"))
    sink = Collector()
    with pytest.raises(EngineError) as info:
        await model.generate(GenerationRequest(MESSAGES), sink)
    assert info.value.code == "engine_error"
    assert len(sink.pieces) == 2


async def test_context_limit_gives_context() -> None:
    model = await FakeEngine(context_length=5).load(Path("fake.gguf"))
    sink = Collector()
    result = await model.generate(GenerationRequest(MESSAGES), sink)  # 3 prompt "tokens"
    assert result.finish_reason == "context"
    assert len(sink.pieces) == 2


async def test_load_counts_progress_delay_and_errors() -> None:
    engine = FakeEngine(load_delay=0.02)
    progress: list[float] = []
    await asyncio.gather(engine.load(Path("a"), progress.append), engine.load(Path("a")))
    assert engine.load_count == 2
    assert engine.max_concurrent_loads == 2  # the fake does not single-flight: the runner must
    assert progress[0] == 0.0 and progress[-1] == 1.0
    engine.load_error = EngineError("model_load_failed", "broken file")
    with pytest.raises(EngineError):
        await engine.load(Path("a"))
    assert engine.loads_in_progress == 0


async def test_one_loaded_model_runs_several_generations_at_once() -> None:
    engine = FakeEngine(token_delay=0.002)
    model = await engine.load(Path("fake.gguf"))
    sinks = [Collector() for _ in range(3)]
    await asyncio.gather(*(model.generate(GenerationRequest(MESSAGES), s) for s in sinks))
    assert model.max_concurrent_generations == 3
    assert engine.load_count == 1
    assert all(len(s.pieces) == len(engine.tokens) for s in sinks)


async def test_unloaded_model_refuses_to_generate() -> None:
    engine = FakeEngine()
    model = await engine.load(Path("fake.gguf"))
    await model.unload()
    await model.unload()
    assert engine.unload_count == 1
    with pytest.raises(EngineError) as info:
        await model.generate(GenerationRequest(MESSAGES), Collector())
    assert info.value.code == "model_unloaded"


async def test_a_cancelled_caller_waits_for_the_worker_to_stop() -> None:
    engine = FakeEngine(tokens=[f"t{i}" for i in range(10_000)], token_delay=0.001)
    model = await engine.load(Path("fake.gguf"))
    task = asyncio.create_task(model.generate(GenerationRequest(MESSAGES), Collector()))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.workers_running == 0  # the thread ended before generate() returned


def test_contexts_split_the_cores_between_single_thread_decoders() -> None:
    from lmsp_desktop.core.engines.llama_layout import context_layout

    assert context_layout(4, 1, 2) == [2, 2]  # 2 cores, 1 thread each: two contexts
    assert context_layout(4, 1, 1) == [4]
    assert context_layout(4, 7, 8) == [4]  # the threads take the cores: one context
    assert context_layout(3, 1, 8) == [1, 1, 1]
    assert context_layout(5, 1, 2) == [3, 2]
    assert context_layout(4, 1, 2, contexts=1) == [4]
