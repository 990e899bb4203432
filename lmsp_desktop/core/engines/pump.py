"""Runs a blocking token loop in a worker thread and hands its tokens to the sink in batches.

The thread pushes each token onto an asyncio queue (thread-safely); the loop side hands
everything that accumulated since the previous sink call finished to the sink (a natural
group commit). When the sink answers False or the request's cancel event is set, the thread
stops before evaluating or sampling another token.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lmsp_desktop.core.engines.base import (
    EngineError,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    TokenPiece,
    TokenSink,
)


@dataclass(frozen=True)
class LoopOutcome:
    """What the thread's token loop reports when it ends."""

    finish_reason: FinishReason
    input_tokens: int
    seed_used: int | None = None


class _Done:
    """Queue marker: the thread's loop has returned (or raised)."""


_DONE = _Done()


class TokenChannel:
    """The thread's side: emit tokens, ask whether to stop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[TokenPiece | _Done],
        cancel: threading.Event,
    ) -> None:
        self._loop = loop
        self._queue = queue
        self._cancel = cancel
        self._refused = threading.Event()

    def emit(self, piece: TokenPiece) -> None:
        self._put(piece)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def put_on_loop(self, piece: TokenPiece) -> None:
        """Queue a piece; only on the loop's thread (see `emit_all`)."""
        self._queue.put_nowait(piece)

    def should_stop(self) -> bool:
        """True once the sink refused more tokens or the runner set the cancel event."""
        return self._refused.is_set() or self._cancel.is_set()

    def refuse(self) -> None:
        self._refused.set()

    @property
    def refused(self) -> bool:
        return self._refused.is_set()

    def close(self) -> None:
        self._put(_DONE)

    def _put(self, item: TokenPiece | _Done) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:
            # The loop is closed (process shutting down): nobody is listening any more.
            self._refused.set()


# What starting a generation returns: something that completes with its outcome.
Started = Awaitable[LoopOutcome] | concurrent.futures.Future[LoopOutcome]


def emit_all(loop: asyncio.AbstractEventLoop, items: list[tuple[TokenChannel, TokenPiece]]) -> bool:
    """Hand the tokens of one batched decode step (several generations) to the loop in one
    thread hop instead of one per token. False when the loop is closed."""

    def deliver() -> None:
        for channel, piece in items:
            channel.put_on_loop(piece)

    try:
        loop.call_soon_threadsafe(deliver)
    except RuntimeError:
        for channel, _piece in items:
            channel.refuse()
        return False
    return True


async def pump(
    request: GenerationRequest,
    sink: TokenSink,
    body: Callable[[TokenChannel], LoopOutcome],
) -> GenerationResult:
    """Run `body` in a thread, deliver its tokens to `sink`, and return the result.

    The result counts the resumed tokens plus the tokens the sink accepted; once the sink
    refuses, later tokens are dropped and the finish reason is "cancelled".
    """

    def start(channel: TokenChannel) -> Awaitable[LoopOutcome]:
        def run() -> LoopOutcome:
            try:
                return body(channel)
            finally:
                channel.close()

        return asyncio.to_thread(run)

    return await pump_started(request, sink, start)


async def pump_started(
    request: GenerationRequest,
    sink: TokenSink,
    start: Callable[[TokenChannel], Started],
) -> GenerationResult:
    """Like `pump`, for a generation that something else runs (a batching thread): `start`
    hands it the channel and returns what completes with its outcome; whoever runs it calls
    `channel.close()` after its last token."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[TokenPiece | _Done] = asyncio.Queue()
    channel = TokenChannel(loop, queue, request.cancel)
    started = start(channel)
    worker: asyncio.Future[LoopOutcome] = (
        asyncio.wrap_future(started)
        if isinstance(started, concurrent.futures.Future)
        else asyncio.ensure_future(started)
    )
    delivered = 0
    try:
        finished = False
        while not finished:
            items = [await queue.get()]
            while not queue.empty():
                items.append(queue.get_nowait())
            batch = [item for item in items if isinstance(item, TokenPiece)]
            finished = any(isinstance(item, _Done) for item in items)
            if batch and not channel.refused:
                delivered += len(batch)
                if not await sink(batch):
                    channel.refuse()
        outcome = await worker
    finally:
        if not worker.done():
            # Cancelled or the sink raised: stop the thread and wait for it (without
            # cancelling the wait itself) so nobody touches the model while it still runs.
            channel.refuse()
            await asyncio.wait([worker])
            if not worker.cancelled():
                worker.exception()  # retrieved: the error being raised here wins
    reason: FinishReason = "cancelled" if channel.refused else outcome.finish_reason
    return GenerationResult(
        finish_reason=reason,
        input_tokens=outcome.input_tokens,
        output_tokens=len(request.resume_tokens) + delivered,
        seed_used=outcome.seed_used,
    )


def check_request(request: GenerationRequest) -> None:
    """Reject requests an engine cannot honour before any work starts."""
    if request.max_output_tokens is not None and request.max_output_tokens < 1:
        raise EngineError(
            "invalid_max_output_tokens",
            "max_output_tokens must be at least 1; raise it or leave it unset.",
        )
