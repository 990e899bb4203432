"""Upstream models as the runner's Engine/LoadedModel: the task lives here, the tokens are
made on the upstream and streamed into the same token sink as a local model's.

Faults (unreachable, too slow, 5xx, a stream cut mid-way) are retried with backoff as far as
the task's policy allows: before any output every policy retries (nothing would be repeated
or lost); after some output `resume` continues the assistant message from the text so far,
`retry` starts the task over (the runner requeues it), `fail` fails. When the tries run out
the task fails with `upstream_unavailable` and the upstream's own message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines.base import (
    CancelEvent,
    EngineError,
    GenerationRequest,
    GenerationResult,
    LoadSettings,
    ProgressSink,
    TokenPiece,
    TokenSink,
)
from lmsp_desktop.core.upstreams.client import Chunk, UpstreamClient, UpstreamFault

log = logging.getLogger(__name__)
ATTEMPTS = 4  # tries of one generation before the task fails with upstream_unavailable
BACKOFF_S = 1.0  # first pause between tries; doubles each time (1, 2, 4 s)
CANCEL_POLL_S = 0.05  # how often a waiting generation looks at the cancel flag
UNKNOWN_TOKEN = -1  # an upstream streams text, not token ids


class UpstreamUnavailable(EngineError):
    """The upstream failed for good. `requeue`: the policy is `retry` and output already
    exists, so the runner should start the task over rather than fail it."""

    def __init__(self, message: str, *, requeue: bool = False) -> None:
        super().__init__("upstream_unavailable", message)
        self.requeue = requeue


class Upstream:
    """One registered upstream as the runner sees it: its client, what the last probe found,
    and the limit on generations running on it at once (so a batching server gets a batch)."""

    def __init__(self, client: UpstreamClient, max_concurrency: int) -> None:
        self.client = client
        self.max_concurrency = max_concurrency
        self.slots = asyncio.Semaphore(max_concurrency)
        self.kind: str | None = None  # openai | lmsp, once a probe has told
        # vLLM's fields for continuing the last assistant message; others ignore them, and
        # one that refuses them is asked again without.
        self.sends_prefill_fields = True
        self.on_fault: Callable[[str], None] | None = None  # marks it down in the catalog

    @property
    def name(self) -> str:
        return self.client.name

    def engine(self, remote_model: str) -> UpstreamEngine:
        return UpstreamEngine(self, remote_model)


class UpstreamEngine:
    """The Engine for one upstream model: loading is only binding to the model's name."""

    def __init__(self, upstream: Upstream, remote_model: str) -> None:
        self.upstream = upstream
        self.remote_model = remote_model

    async def load(
        self,
        path: Path,
        progress: ProgressSink | None = None,
        *,
        settings: LoadSettings | None = None,  # the upstream decides its own context
    ) -> UpstreamModel:
        if progress is not None:
            progress(1.0)
        return UpstreamModel(self.upstream, self.remote_model)


class UpstreamModel:
    """A LoadedModel whose generations run on the upstream. Several may run at once."""

    # The runner keeps the text so far in the snapshot: `resume` continues from it.
    resumes_from_text = True

    def __init__(self, upstream: Upstream, remote_model: str) -> None:
        self.upstream = upstream
        self.remote_model = remote_model
        self.context_length = 0  # not known here; the upstream enforces its own

    async def unload(self) -> None:
        return None

    async def generate(self, request: GenerationRequest, sink: TokenSink) -> GenerationResult:
        if request.prompt is not None:
            raise EngineError(
                "unsupported_on_upstream",
                "Legacy completions (POST /v1/completions) run on local models only. Send "
                f"this request to a local model, or to {self.upstream.name}'s own API.",
            )
        if (
            request.tools
            or request.grammar
            or any(m.get("role") == "tool" or m.get("tool_calls") for m in request.messages)
        ):
            # Said plainly rather than ignored: the upstream would answer without them.
            raise EngineError(
                "unsupported_on_upstream",
                f"Function tools and structured output (text.format, response_format) do not "
                f"run on upstream models yet. Send this request to a local model, or to "
                f"{self.upstream.name}'s own API directly.",
            )
        state = _Progress(text=request.resume_text, tokens=len(request.resume_tokens))
        attempt = 0
        while True:
            try:
                return await self._attempt(request, sink, state)
            except UpstreamFault as fault:
                if request.cancel.is_set():
                    return state.result("cancelled")
                attempt += 1
                message = f"Upstream {self.upstream.name}: {fault.message}"
                log.warning("%s (try %d of %d)", message, attempt, ATTEMPTS)
                if fault.retryable and self.upstream.on_fault is not None:
                    self.upstream.on_fault(fault.message)  # the app shows it down
                has_output = bool(state.text)
                if state.sent_prefill_fields and not fault.retryable:
                    self.upstream.sends_prefill_fields = False
                    continue  # refused vLLM's continue fields: ask plainly, at once
                if not fault.retryable or attempt >= ATTEMPTS:
                    raise UpstreamUnavailable(message) from None
                if has_output and request.on_restart == "retry":
                    raise UpstreamUnavailable(message, requeue=True) from None
                if has_output and request.on_restart != "resume":
                    raise UpstreamUnavailable(message) from None
                if await _cancelled_during(request, BACKOFF_S * 2 ** (attempt - 1)):
                    return state.result("cancelled")

    async def _attempt(
        self, request: GenerationRequest, sink: TokenSink, state: _Progress
    ) -> GenerationResult:
        messages = list(request.messages)
        if state.text:
            # Continue the assistant message from the text so far. Not byte-exact: the
            # upstream sees text, not the token ids it sampled.
            messages.append({"role": "assistant", "content": state.text})
        state.sent_prefill_fields = False
        prefill: dict[str, bool] = {}
        if state.text and self.upstream.kind != "lmsp" and self.upstream.sends_prefill_fields:
            state.sent_prefill_fields = True
            prefill = {"continue_final_message": True, "add_generation_prompt": False}
        options: dict[str, Any] = {
            "temperature": request.temperature,
            "top_p": request.top_p,
            **prefill,
        }
        if request.seed is not None:
            options["seed"] = request.seed
        if request.max_output_tokens is not None:
            left = request.max_output_tokens - state.tokens
            if left <= 0:
                return state.result("length")
            options["max_tokens"] = left
        if self.upstream.kind is None:  # not probed yet (a task resumed at startup)
            probe = await self.upstream.client.probe()
            if not probe.reachable:
                raise UpstreamFault(probe.error or "unreachable")
            self.upstream.kind = probe.kind
        upstream_ids: list[str] = []
        async with self.upstream.slots:
            stream = self.upstream.client.stream(
                self.upstream.kind or "openai",
                self.remote_model,
                messages,
                options,
                upstream_ids.append,
            )
            reader = asyncio.ensure_future(self._read(stream, sink, state, request.sink_interval))
            watcher = asyncio.ensure_future(_wait_cancel(request))
            try:
                await asyncio.wait({reader, watcher}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                watcher.cancel()
                if not reader.done():
                    reader.cancel()  # cancel: closes the HTTP stream at once
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
                await stream.aclose()
            if request.cancel.is_set() or state.stopped:
                if upstream_ids:  # another LMSP: its cancel route stops its task too
                    await self.upstream.client.cancel(upstream_ids[-1])
                return state.result("cancelled")
        return state.result(state.finish_reason or "stop")

    async def _read(self, stream: Any, sink: TokenSink, state: _Progress, interval: float) -> None:
        """Hand chunks to the sink: the first at once, then what arrived meanwhile no more
        often than every `interval` seconds (the request's sink_interval, as a local
        engine's tokens) and whatever is left at the end at once. Each hand-over is a commit
        of the task's deltas: committing every chunk cost the service ~1.5 ms of CPU per
        token, taken from the upstream's decoding on a machine it shares (B13)."""
        loop = asyncio.get_running_loop()
        pending: list[TokenPiece] = []
        wake = asyncio.Event()
        ended = loop.create_future()  # the stream's last chunk is in `pending`

        async def drain() -> None:
            handed_at = -math.inf
            while True:
                await wake.wait()
                wait = handed_at + interval - loop.time()
                if wait > 0 and not ended.done():
                    await asyncio.wait([ended], timeout=wait)  # the end cuts it short
                wake.clear()
                batch, pending[:] = list(pending), []
                handed_at = loop.time()
                # Shielded: a cancel arriving mid-write must not cut a commit in half-known
                # state; the write finishes and the sink's answer stops the stream.
                if batch and not await asyncio.shield(sink(batch)):
                    state.stopped = True
                    return
                if ended.done() and not pending:
                    return

        async def flush() -> None:
            ended.set_result(None)
            wake.set()
            await writer

        writer = asyncio.ensure_future(drain())
        try:
            chunk: Chunk
            try:
                async for chunk in stream:
                    if writer.done():
                        break  # the sink said stop (cancel committed)
                    state.absorb(chunk)
                    if chunk.text:
                        pending.append(TokenPiece(UNKNOWN_TOKEN, chunk.text))
                        wake.set()
            except UpstreamFault:
                # The text before the fault is the answer's (state.text has it and a resumed
                # try goes on after it): it is committed before the fault is handled.
                await flush()
                raise
            await flush()
        finally:
            if not writer.done():
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer


class _Progress:
    """What one generation has produced so far, across its tries."""

    def __init__(self, text: str, tokens: int) -> None:
        self.text = text
        self.tokens = tokens
        self.resumed_tokens = tokens
        self.run_tokens = 0  # chunks of this try
        self.input_tokens = 0
        self.cached_tokens = 0  # as the upstream reports them; 0 when it does not
        self.reported_output: int | None = None
        self.finish_reason: str | None = None
        self.stopped = False
        self.sent_prefill_fields = False

    def absorb(self, chunk: Chunk) -> None:
        if chunk.text:
            self.text += chunk.text
            self.tokens += 1
        if chunk.finish_reason:
            self.finish_reason = chunk.finish_reason
        if chunk.input_tokens is not None:
            self.input_tokens = chunk.input_tokens
        if chunk.cached_tokens is not None:
            self.cached_tokens = chunk.cached_tokens
        if chunk.output_tokens is not None:
            self.reported_output = chunk.output_tokens

    def result(self, reason: str) -> GenerationResult:
        output = self.tokens
        if self.reported_output is not None and reason != "cancelled":
            output = self.resumed_tokens + self.reported_output
        return GenerationResult(
            finish_reason=reason,  # type: ignore[arg-type]
            input_tokens=self.input_tokens,
            output_tokens=output,
            cached_tokens=self.cached_tokens,
        )


async def _wait_cancel(request: GenerationRequest) -> None:
    # The runner's cancel flag is a threading.Event (local engines check it in their
    # thread): a CancelEvent calls back when it is set (from any thread); another is polled.
    if isinstance(request.cancel, CancelEvent):
        loop = asyncio.get_running_loop()
        cancelled = loop.create_future()

        def wake() -> None:
            if not cancelled.done():
                cancelled.set_result(None)

        def on_set() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(wake)

        request.cancel.when_set(on_set)
        await cancelled
        return
    while not request.cancel.is_set():  # noqa: ASYNC110
        await asyncio.sleep(CANCEL_POLL_S)


async def _cancelled_during(request: GenerationRequest, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_wait_cancel(request), seconds)
    return request.cancel.is_set()
