"""A model's second context, opened when a second request runs beside the first (the
service's workers, contexts_on_demand), opens only if the memory available at that moment
has room for it: other models may have loaded since this one's plan counted it, and the
out-of-memory killer would come before any fallback. Without the room the second request
waits for the open context's sequence (as on a model loaded with one context), the log
says why, nothing is killed, and a later request opens it once the memory allows. The
embedding context a first embedding opens (at the size its inputs need) is checked the same
way; an embedding cannot wait for it, so it is refused (507 insufficient_memory in the
service) and the worker serves on.

The memory is faked the way the memory tests fake it, LMSP_MEMORY_AVAILABLE (read at every
check, by the worker from the environment it was started with). The models are the demo
model cut to 4 blocks (tests/support/cut_model.py): the claims are about which request
decodes when, not about the words; the exactness verdict is given (exact=True), as a
restarted service gives it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lmsp_desktop.core.engines.base import (
    EmbeddingRequest,
    EngineError,
    GenerationRequest,
    TokenPiece,
)
from lmsp_desktop.core.engines.llama import LlamaEngine
from lmsp_desktop.core.engines.worker import WorkerEngine
from lmsp_desktop.core.models.machine import AVAILABLE_ENV
from tests.support.cut_model import cut_demo_model
from tests.support.polling import until

STORY = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# Two contexts of one sequence each: a second request either opens the second context
# (decodes beside the first) or waits for the first context's only sequence.
OPTIONS: dict[str, Any] = {"n_threads": 1, "parallel": 2, "contexts": 2, "contexts_on_demand": True}
SHORT = "100M"  # less than any context needs with the reserve kept free
PLENTY = "64G"
# More than the first request reaches in any test here: it is cancelled once the second has
# answered or is seen waiting (within the cut model's 4,096-token context).
FIRST_BUDGET = 3000
REFUSED = "not opening another context now"  # the engine's log line when the memory says no


class Order:
    """Every token hand-over of both requests, in the order they reached the caller."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.count = {"first": 0, "second": 0}

    def sink(self, name: str) -> Callable[[list[TokenPiece]], Awaitable[bool]]:
        async def take(batch: list[TokenPiece]) -> bool:
            self.events.append(name)
            self.count[name] += len(batch)
            return True

        return take

    def second_waited_for_first(self) -> bool:
        last_first = max(i for i, e in enumerate(self.events) if e == "first")
        return self.events.index("second") > last_first


async def both(model: Any, order: Order, waiting: Callable[[], bool]) -> bool:
    """The first request, with a budget it never reaches here, and a second one sent once
    the first has streamed tokens (it is decoding). Whether the second ran beside the first
    (it answered while the first still decoded); else it waited for the first's sequence,
    which `waiting()` says (the engine's log line) and cancelling the first frees. Either
    way the first is cancelled, never ended by its length: the second is always sent while
    the first decodes, however slow the machine."""
    first = GenerationRequest(STORY, max_output_tokens=FIRST_BUDGET, temperature=0)
    running = asyncio.create_task(model.generate(first, order.sink("first")))
    await until(lambda: order.count["first"] > 0, 120, "the first request's tokens")
    second = GenerationRequest(QUESTION, max_output_tokens=4, temperature=0)
    answering = asyncio.create_task(model.generate(second, order.sink("second")))
    await until(lambda: answering.done() or waiting(), 120, "the second's answer or its wait")
    beside = answering.done()
    first.cancel.set()
    assert (await answering).output_tokens == 4
    reason = (await running).finish_reason
    assert reason == "cancelled", reason  # it was still decoding when the second came
    return beside


class Stderr:
    """What the worker process wrote to stderr so far (its log)."""

    def __init__(self, capfd: pytest.CaptureFixture[str]) -> None:
        self.capfd = capfd
        self.text = ""

    def says(self, words: str) -> bool:
        self.text += self.capfd.readouterr().err
        return words in self.text


async def test_a_worker_short_of_memory_serves_the_second_request_after_the_first(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(AVAILABLE_ENV, SHORT)  # the worker starts with it
    model = await WorkerEngine(**OPTIONS).load(cut_demo_model(), exact=True)
    try:
        order = Order()
        err = Stderr(capfd)
        assert not await both(model, order, lambda: err.says(REFUSED))
        assert order.second_waited_for_first(), order.events
        assert model.crash is None  # nothing was killed: the worker serves on
        os.kill(model.pid, 0)
        assert f"({AVAILABLE_ENV}={SHORT})" in err.text, err.text
    finally:
        await model.unload()


async def test_a_worker_with_the_memory_runs_the_second_request_beside_the_first(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(AVAILABLE_ENV, PLENTY)
    model = await WorkerEngine(**OPTIONS).load(cut_demo_model(), exact=True)
    try:
        err = Stderr(capfd)
        assert await both(model, Order(), lambda: err.says(REFUSED))
        assert not err.says(REFUSED)
    finally:
        await model.unload()


async def test_a_later_request_opens_the_context_once_the_memory_allows(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine in this process, so the memory can change between two rounds."""
    model = await LlamaEngine(**OPTIONS).load(cut_demo_model(), exact=True)
    try:
        monkeypatch.setenv(AVAILABLE_ENV, SHORT)
        short = Order()
        assert not await both(model, short, lambda: REFUSED in caplog.text)
        assert short.second_waited_for_first(), short.events
        monkeypatch.setenv(AVAILABLE_ENV, PLENTY)  # another model was unloaded meanwhile
        assert await both(model, Order(), lambda: False)
        assert "opened another context: the memory allows it now" in caplog.text
    finally:
        await model.unload()


async def test_a_worker_short_of_memory_refuses_the_embedding_context_and_serves_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(AVAILABLE_ENV, SHORT)
    model = await WorkerEngine(n_threads=1).load(cut_demo_model(), exact=True)
    try:
        # The context is sized by the input: a long one's does not fit, a short one's does.
        with pytest.raises(EngineError) as refused:
            await model.embed(EmbeddingRequest(["word " * 1500]))
        assert refused.value.code == "insufficient_memory", refused.value
        assert "embedding context needs about" in refused.value.message
        assert "(inputs up to 2048 tokens)" in refused.value.message
        assert f"({AVAILABLE_ENV}={SHORT})" in refused.value.message
        assert model.crash is None  # nothing was killed: the worker serves on
        os.kill(model.pid, 0)
        short = await model.embed(EmbeddingRequest(["a lighthouse by the sea"]))
        assert short.vectors.shape[0] == 1
        order = Order()
        request = GenerationRequest(QUESTION, max_output_tokens=3, temperature=0)
        assert (await model.generate(request, order.sink("first"))).output_tokens == 3
    finally:
        await model.unload()
