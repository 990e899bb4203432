"""An upstream's stream reaches the runner's sink in hand-overs of the request's
sink_interval, as a local engine's tokens do (B13): each hand-over is a commit, and
committing every chunk cost the service ~1.5 ms of CPU per token. The first chunk, the end,
and the text before a fault are never held back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from lmsp_desktop.core.engines.base import GenerationRequest
from lmsp_desktop.core.upstreams import engine as upstream_engine
from lmsp_desktop.core.upstreams.client import UpstreamClient
from lmsp_desktop.core.upstreams.engine import Upstream, UpstreamModel
from tests.support.fake_upstream import Behaviour, FakeUpstream
from tests.unit.core.test_engine_fake import MESSAGES, Collector

HANG = 60.0  # a bound on a hang, not a timing assertion
WORDS = [f" w{i}" for i in range(40)]


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_engine, "BACKOFF_S", 0.01)


@pytest.fixture
async def served() -> AsyncIterator[list[FakeUpstream]]:
    started: list[FakeUpstream] = []
    yield started
    for fake in started:
        await fake.stop()


async def model_on(served: list[FakeUpstream], script: list[Behaviour]) -> UpstreamModel:
    fake = FakeUpstream(script)
    served.append(fake)
    url = await fake.start()
    return UpstreamModel(Upstream(UpstreamClient("up", url, None, timeout_s=30), 1), "m1")


async def generate(model: UpstreamModel, sink: Collector, **kw: object) -> str:
    request = GenerationRequest(MESSAGES, **kw)  # type: ignore[arg-type]
    try:
        result = await asyncio.wait_for(model.generate(request, sink), HANG)
    finally:
        await model.upstream.client.close()
    return result.finish_reason


async def test_chunks_faster_than_the_interval_are_handed_over_together(
    served: list[FakeUpstream],
) -> None:
    model = await model_on(served, [Behaviour(words=WORDS, delay_s=0.005)])
    sink = Collector()  # instant: without the interval every chunk would go alone
    assert await generate(model, sink, sink_interval=0.1) == "stop"
    assert [p.text for p in sink.pieces] == WORDS  # every chunk, in order, once
    assert [p.text for p in sink.batches[0]] == WORDS[:1]  # the first is not held back
    assert len(sink.batches) < len(WORDS) / 2


async def test_the_end_of_the_stream_is_not_held_back_by_the_interval(
    served: list[FakeUpstream],
) -> None:
    model = await model_on(served, [Behaviour(words=WORDS[:5], delay_s=0.005)])
    sink = Collector()
    # An hour-long interval: only the end of the stream can release the last chunks.
    assert await generate(model, sink, sink_interval=3600.0) == "stop"
    assert [p.text for p in sink.pieces] == WORDS[:5]


async def test_the_text_before_a_cut_is_handed_over_before_the_resumed_try(
    served: list[FakeUpstream],
) -> None:
    script = [Behaviour("cut", words=WORDS[:5], delay_s=0.005), Behaviour(words=[" end"])]
    model = await model_on(served, script)
    sink = Collector()
    request = {"sink_interval": 3600.0, "on_restart": "resume"}
    assert await generate(model, sink, **request) == "stop"
    # The resumed try continued after all five words: the sink has them, then the rest.
    assert [p.text for p in sink.pieces] == [*WORDS[:5], " end"]
    assert served[0].requests[1]["messages"][-1]["content"] == "".join(WORDS[:5])
