"""Runs a blocking token loop in a worker thread and hands its tokens to the sink in batches.

The thread appends each token to its channel; the loop side hands everything that
accumulated since the previous sink call finished to the sink (a natural group commit), and
no more often than the request's `sink_interval`: tokens that arrive sooner wait (never past
the end of the generation) and go together. The thread wakes the event loop only when the
loop side is waiting for a token, not once per token (and not at all while the loop side
sleeps out the interval after a hand-over): each wake-up is a thread hop
(a write to the loop's self-pipe, a context switch) that costs the decoding cores time.
When the sink answers False or the request's cancel event is set, the thread stops before
evaluating or sampling another token. An `EndingSink` gets the tokens left at the end with
the generation's result, in one hand-over (`last`).

The channel also carries how far the prompt has been read (`report_prompt` from the thread,
`deliver_prompt` on the loop) to the request's `on_prompt`: a report per prompt chunk at
most, and no more than one every PROMPT_REPORT_INTERVAL_S (ReportThrottle), so a fast
engine's small chunks cost no more wake-ups than a few a second.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lmsp_desktop.core.engines.base import (
    EndingSink,
    EngineError,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    PromptProgress,
    TokenPiece,
    TokenSink,
)

# The least time between two reports of a prompt read's progress (the first report, which
# says the prompt's length and its cached part, always goes at once). llama.cpp reads a
# prompt in chunks of up to n_batch tokens (seconds each on a CPU, milliseconds on a GPU):
# a report per chunk on a CPU, a few a second on a GPU, never one per token.
PROMPT_REPORT_INTERVAL_S = 0.25


@dataclass(frozen=True)
class LoopOutcome:
    """What the thread's token loop reports when it ends."""

    finish_reason: FinishReason
    input_tokens: int
    seed_used: int | None = None
    cached_tokens: int = 0  # prompt tokens the prefix cache held (GenerationResult's)


class ReportThrottle:
    """Whether a progress report goes now: the first always, then at most one every
    `interval` seconds of `clock` (later ones carry the newer figures; what is dropped in
    between is only an older figure). Used from one thread at a time."""

    def __init__(
        self,
        interval: float = PROMPT_REPORT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._last = -math.inf

    def due(self) -> bool:
        now = self._clock()
        if now - self._last < self.interval:
            return False
        self._last = now
        return True


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class TokenChannel:
    """Between the thread (emit tokens, ask whether to stop, close) and the loop side (take
    what has arrived, wait for more)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        cancel: threading.Event,
        on_prompt: Callable[[PromptProgress], None] | None = None,
    ) -> None:
        self._loop = loop
        self._cancel = cancel
        self._on_prompt = on_prompt
        self.prompt_throttle = ReportThrottle()
        self._refused = threading.Event()
        self._lock = threading.Lock()
        self._arrived: list[TokenPiece] = []
        self._closed = False
        # The loop side's wait for the next arrival (or the end), None while it is not
        # waiting: only then does an arrival cost a thread hop.
        self._waiter: asyncio.Future[None] | None = None
        # Done once the thread's loop has returned: ends a wait for more tokens at once.
        self.ended: asyncio.Future[None] = loop.create_future()
        # Called (on the loop) when the sink refuses more tokens, for a generation running
        # elsewhere (an engine worker process) that must be told to stop.
        self.on_refuse: Callable[[], None] | None = None

    # -- the thread's side ------------------------------------------------------------------
    def emit(self, piece: TokenPiece) -> None:
        emit_all(self._loop, [(self, piece)])

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _append(self, piece: TokenPiece) -> asyncio.Future[None] | None:
        """Add a piece; the loop side's waiter if it must be woken."""
        with self._lock:
            self._arrived.append(piece)
            waiter, self._waiter = self._waiter, None
        return waiter

    def report_prompt(self, progress: PromptProgress, *, always: bool = False) -> None:
        """From the thread reading the prompt: how far it is, passed to the loop unless the
        throttle holds it back (or nobody listens). `always`: a change the listener must
        not miss (its read begins: no longer waiting), never held back."""
        if self._on_prompt is None:
            return
        if not self.prompt_throttle.due() and not always:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
            self._loop.call_soon_threadsafe(self.deliver_prompt, progress)

    def should_stop(self) -> bool:
        """True once the sink refused more tokens or the runner set the cancel event."""
        return self._refused.is_set() or self._cancel.is_set()

    def refuse(self) -> None:
        first = not self._refused.is_set()
        self._refused.set()
        if first and self.on_refuse is not None:
            self.on_refuse()

    @property
    def refused(self) -> bool:
        return self._refused.is_set()

    def close(self) -> None:
        """After the last token: the loop side takes what is left and ends."""
        with self._lock:
            self._closed = True
            waiter, self._waiter = self._waiter, None

        def ended() -> None:
            _wake(self.ended)
            if waiter is not None:
                _wake(waiter)

        try:
            self._loop.call_soon_threadsafe(ended)
        except RuntimeError:
            # The loop is closed (process shutting down): nobody is listening any more.
            self._refused.set()

    # -- the loop's side --------------------------------------------------------------------
    def deliver(self, pieces: list[TokenPiece]) -> None:
        """Tokens that arrived on the loop itself (from an engine worker process): a whole
        hand-over group under one lock, and one wake-up."""
        if not pieces:
            return
        with self._lock:
            self._arrived.extend(pieces)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            _wake(waiter)

    def deliver_prompt(self, progress: PromptProgress) -> None:
        """On the loop: how far the prompt has been read (from the thread's report, or from
        an engine worker process's message, throttled there), told to `on_prompt`."""
        if self._on_prompt is not None and not self._closed:
            self._on_prompt(progress)

    def take(self) -> tuple[list[TokenPiece], bool]:
        """Everything arrived so far, and whether the thread has closed the channel."""
        with self._lock:
            taken, self._arrived = self._arrived, []
            return taken, self._closed

    async def wait(self) -> None:
        """Until something arrives or the channel closes (at once if either happened)."""
        with self._lock:
            if self._arrived or self._closed:
                return
            waiter = self._waiter = self._loop.create_future()
        await waiter


# What starting a generation returns: something that completes with its outcome.
Started = Awaitable[LoopOutcome] | concurrent.futures.Future[LoopOutcome]


def emit_all(loop: asyncio.AbstractEventLoop, items: list[tuple[TokenChannel, TokenPiece]]) -> bool:
    """Hand over the tokens of one decode step (of several generations), waking the loop
    at most once, and only for generations whose loop side waits. False when the loop is
    closed."""
    waiters = [w for channel, piece in items if (w := channel._append(piece)) is not None]
    if not waiters:
        return True

    def deliver() -> None:
        for waiter in waiters:
            _wake(waiter)

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
    channel = TokenChannel(loop, request.cancel, request.on_prompt)
    started = start(channel)
    worker: asyncio.Future[LoopOutcome] = (
        asyncio.wrap_future(started)
        if isinstance(started, concurrent.futures.Future)
        else asyncio.ensure_future(started)
    )
    delivered = 0
    handed_at = -math.inf  # when the sink last got tokens (loop time)
    last: list[TokenPiece] | None = None  # the tokens that go with the end (EndingSink)
    try:
        finished = False
        while not finished:
            wait = handed_at + request.sink_interval - loop.time()
            if wait > 0 and not channel.ended.done() and not channel.should_stop():
                # Let the tokens of the interval gather before looking: the thread wakes
                # the loop side only while it waits for a token, so a fast model's group
                # costs one timer here and no wake-up from the decoding thread. The end of
                # the generation cuts the wait short.
                await asyncio.wait([channel.ended], timeout=wait)
            await channel.wait()  # at once if tokens came meanwhile
            batch, finished = channel.take()
            if finished and isinstance(sink, EndingSink) and not channel.refused:
                # The loop has ended: its outcome follows at once (the channel is closed
                # right before it is known). Ended well, the last tokens go with it.
                await asyncio.wait([worker])
                if not worker.cancelled() and worker.exception() is None:
                    last = batch
                    break
            if batch and not channel.refused:
                handed_at = loop.time()
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
    result = GenerationResult(
        finish_reason=reason,
        input_tokens=outcome.input_tokens,
        output_tokens=len(request.resume_tokens) + delivered + len(last or ()),
        seed_used=outcome.seed_used,
        cached_tokens=outcome.cached_tokens,
    )
    if last is not None and isinstance(sink, EndingSink) and not await sink.last(last, result):
        return dataclasses.replace(result, finish_reason="cancelled")
    return result


def check_request(request: GenerationRequest) -> None:
    """Reject requests an engine cannot honour before any work starts."""
    if request.max_output_tokens is not None and request.max_output_tokens < 1:
        raise EngineError(
            "invalid_max_output_tokens",
            "max_output_tokens must be at least 1; raise it or leave it unset.",
        )
