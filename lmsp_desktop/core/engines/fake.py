"""A scripted engine for unit tests of the runner: same contract as LlamaEngine, no model.

Token i of the script has id FIRST_TOKEN_ID + i, so a resumed run can check that the
tokens it replays are the ones the script produced. Everything a test may want to provoke
is an attribute that can be changed between calls: delays, a gate to step tokens one at a
time, load and generation errors; counters record loads, unloads and requests.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from lmsp_desktop.core.engines.base import (
    EngineError,
    FinishReason,
    GenerationRequest,
    GenerationResult,
    LoadSettings,
    ProgressSink,
    TokenPiece,
    TokenSink,
)
from lmsp_desktop.core.engines.pump import LoopOutcome, TokenChannel, check_request, pump
from lmsp_desktop.core.engines.sampling import new_seed

FIRST_TOKEN_ID = 1000
DEFAULT_TOKENS: tuple[str, ...] = ("Hello", ",", " this", " is", " a", " fake", " model", ".")


def token_ids(tokens: Sequence[str]) -> list[int]:
    """The ids the fake model gives a script's tokens."""
    return [FIRST_TOKEN_ID + i for i in range(len(tokens))]


class FakeEngine:
    """Loads FakeModels. `load_count` counts load calls (single-flight tests), and
    `max_concurrent_loads` the most loads seen running at once."""

    def __init__(
        self,
        tokens: Sequence[str] = DEFAULT_TOKENS,
        *,
        token_delay: float = 0.0,
        load_delay: float = 0.0,
        context_length: int = 4096,
        load_error: EngineError | None = None,
        fail_at: int | None = None,
        fail_error: EngineError | None = None,
    ) -> None:
        self.tokens = list(tokens)
        self.token_delay = token_delay
        self.load_delay = load_delay
        self.context_length = context_length
        self.load_error = load_error
        # Raise `fail_error` (default: an "engine_error") instead of producing token `fail_at`.
        self.fail_at = fail_at
        self.fail_error = fail_error
        # When set, each token waits for one release() of this semaphore: step-by-step tests.
        self.gate: threading.Semaphore | None = None
        # How often a token waiting at the gate looks for a stop. Each look takes the GIL from
        # the event loop; a stand-in for a long generation (bench.server's gated engine) looks
        # seldom, as the real engine's worker process never takes the service's GIL at all.
        self.gate_poll_s = 0.005
        self.load_count = 0
        self.unload_count = 0
        self.loads_in_progress = 0
        self.max_concurrent_loads = 0
        self.models: list[FakeModel] = []
        self.requests: list[GenerationRequest] = []
        self.loaded_context_lengths: list[int | None] = []
        self.loaded_settings: list[LoadSettings | None] = []

    async def load(
        self,
        path: Path,
        progress: ProgressSink | None = None,
        *,
        settings: LoadSettings | None = None,
    ) -> FakeModel:
        self.load_count += 1
        self.loaded_settings.append(settings)
        self.loaded_context_lengths.append(settings.context_length if settings else None)
        self.loads_in_progress += 1
        self.max_concurrent_loads = max(self.max_concurrent_loads, self.loads_in_progress)
        try:
            for step in range(4):
                if progress is not None:
                    progress(step / 4)
                if self.load_delay:
                    await asyncio.sleep(self.load_delay / 4)
            if self.load_error is not None:
                raise self.load_error
            if progress is not None:
                progress(1.0)
        finally:
            self.loads_in_progress -= 1
        model = FakeModel(self, Path(path))
        self.models.append(model)
        return model


class FakeModel:
    """A loaded fake model: emits the engine's script token by token in a worker thread."""

    def __init__(self, engine: FakeEngine, path: Path) -> None:
        self.engine = engine
        self.path = path
        self.context_length = engine.context_length
        self.unloaded = False
        self.generating = 0
        self.workers_running = 0  # token loops still running in a thread
        self.max_concurrent_generations = 0
        self._lock = asyncio.Lock()
        self._idle = asyncio.Event()  # set while no generation runs
        self._idle.set()

    @staticmethod
    def render_prompt(messages: list[dict[str, str]]) -> str:
        return "".join(f"{m.get('role', 'user')}: {m.get('content', '')}\n" for m in messages)

    async def generate(self, request: GenerationRequest, sink: TokenSink) -> GenerationResult:
        """Like the llama engine, one loaded fake serves several generations at once."""
        check_request(request)
        seed = request.seed if request.seed is not None else new_seed()
        if self.unloaded:
            raise EngineError("model_unloaded", "The model was unloaded; submit again.")
        self.engine.requests.append(request)
        self.generating += 1
        self._idle.clear()
        self.max_concurrent_generations = max(self.max_concurrent_generations, self.generating)
        try:
            return await pump(request, sink, lambda ch: self._run(request, ch, seed))
        finally:
            self.generating -= 1
            if not self.generating:
                self._idle.set()

    def _run(self, request: GenerationRequest, channel: TokenChannel, seed: int) -> LoopOutcome:
        self.workers_running += 1
        try:
            return self._token_loop(request, channel, seed)
        finally:
            self.workers_running -= 1

    def _token_loop(
        self, request: GenerationRequest, channel: TokenChannel, seed: int
    ) -> LoopOutcome:
        engine = self.engine
        tokens = list(engine.tokens)
        ids = token_ids(tokens)
        prompt = request.prompt
        if prompt is None:
            prompt = self.render_prompt(request.messages)
        prompt_tokens = len(prompt.split() if isinstance(prompt, str) else prompt)
        resume = list(request.resume_tokens)
        if resume != ids[: len(resume)]:
            raise EngineError(
                "resume_mismatch", f"Resume tokens {resume} are not a prefix of {ids}."
            )

        def done(reason: FinishReason) -> LoopOutcome:
            return LoopOutcome(reason, input_tokens=prompt_tokens, seed_used=seed)

        position = len(resume)
        while True:
            if channel.should_stop():
                return done("cancelled")
            if request.max_output_tokens is not None and position >= request.max_output_tokens:
                return done("length")
            if position >= len(tokens):
                return done("stop")
            if prompt_tokens + position >= self.context_length:
                return done("context")
            if engine.fail_at is not None and position >= engine.fail_at:
                raise engine.fail_error or EngineError(
                    "engine_error", f"The fake engine failed at token {position}."
                )
            if not self._wait_turn(channel):
                return done("cancelled")
            channel.emit(TokenPiece(ids[position], tokens[position]))
            position += 1

    def _wait_turn(self, channel: TokenChannel) -> bool:
        """Sleep the token delay and pass the gate, in short slices so a stop is noticed."""
        deadline = time.monotonic() + self.engine.token_delay
        while (remaining := deadline - time.monotonic()) > 0:
            if channel.should_stop():
                return False
            time.sleep(min(remaining, 0.005))
        gate = self.engine.gate
        while gate is not None and not gate.acquire(timeout=self.engine.gate_poll_s):
            if channel.should_stop():
                return False
        return not channel.should_stop()

    async def unload(self) -> None:
        """Like the llama engine: freed once the running generations have ended."""
        async with self._lock:
            await self._idle.wait()
            if not self.unloaded:
                self.unloaded = True
                self.engine.unload_count += 1
