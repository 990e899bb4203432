"""Continuous batching: one thread decodes every running generation of a context together.

Each step puts one token of every generating sequence, plus at most one prompt chunk of
some sequences still reading their prompt, into one llama_decode; new generations join
between steps, and a cancelled one leaves before its next token is evaluated or sampled.
Prompts are read in chunks of PREFILL_CHUNK tokens, so a long prompt delays the running
streams by one chunk per step, never by the whole prompt.

Exactness (resume byte-identical): a sequence's logits must not depend on its batch
neighbours nor on how its earlier tokens were split into chunks. `probe_exactness` checks
both at load (on the demo model both hold, see docs/engine.md, "Batching"); when a model fails the
probe, every sequence is decoded alone with canonical chunks and no prefix reuse.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from lmsp_desktop.core.engines.base import EngineError, FinishReason, GenerationRequest, TokenPiece
from lmsp_desktop.core.engines.grammar import GrammarConstraint, advance, open_constraint, pick
from lmsp_desktop.core.engines.llama_native import (
    GilHoldingCalls,
    TokenBatch,
    logits_row,
    lowlevel,
)
from lmsp_desktop.core.engines.prefix_cache import CachedSequence, PrefixCache
from lmsp_desktop.core.engines.pump import LoopOutcome, TokenChannel, emit_all
from lmsp_desktop.core.engines.sampling import Utf8Stream, sample_token

log = logging.getLogger(__name__)

# Prompt tokens of one sequence per decode. Measured on the demo model: chunks of up to 56
# tokens give bit-identical logits to token-by-token evaluation, 64 and more do not (see
# bench/engine_choice.py); 32 leaves a margin.
PREFILL_CHUNK = 32
# Prompt tokens per step across sequences while others are generating: bounds how long a
# long prompt holds up the running streams.
PREFILL_BUDGET = PREFILL_CHUNK


class Verdict:
    """The exactness probe's answer, set once by the thread that runs it."""

    def __init__(self) -> None:
        self._known = threading.Event()
        self._exact = False

    def set(self, exact: bool) -> None:
        self._exact = exact
        self._known.set()

    def wait(self) -> bool:
        self._known.wait()
        return self._exact


@dataclass
class Job:
    """One generation inside the batching thread."""

    request: GenerationRequest
    channel: TokenChannel
    seed: int
    prompt: list[int]
    done: concurrent.futures.Future[LoopOutcome]
    sequence: CachedSequence | None = None
    # Token lists still to evaluate before sampling starts (prompt chunks, replayed tokens).
    pending: deque[list[int]] = field(default_factory=deque)
    evaluated: list[int] = field(default_factory=list)  # tokens in the sequence's cache
    next_token: int | None = None  # sampled, emitted, not yet evaluated
    position: int = 0  # output position of the next sampled token
    sampled: int = 0
    text: Utf8Stream = field(default_factory=Utf8Stream)
    grammar: GrammarConstraint | None = None
    cached: int = 0  # prompt tokens the claimed sequence already held (not evaluated)

    def finish(self, reason: FinishReason) -> LoopOutcome:
        return LoopOutcome(
            reason, input_tokens=len(self.prompt), seed_used=self.seed, cached_tokens=self.cached
        )


class BatchDecoder:
    """Owns a llama.cpp context of `n_seq` sequences and the thread that decodes them."""

    def __init__(
        self,
        ctx: Any,
        vocab: Any,
        *,
        n_seq: int,
        n_ctx_seq: int,
        token_bytes: Callable[[int], bytes],
        verdict: Verdict,
        probe: Callable[[], bool] | None = None,
    ) -> None:
        self._lc = lowlevel()
        self._calls = GilHoldingCalls()
        self._eog: dict[int, bool] = {}
        self._ctx = ctx
        self._vocab = vocab
        self._n_vocab = int(self._lc.llama_vocab_n_tokens(vocab))
        self._memory = self._lc.llama_get_memory(ctx)
        self.n_seq = n_seq
        self.n_ctx_seq = n_ctx_seq
        self._token_bytes = token_bytes
        # Whether sequences may share a decode and reuse cached prefixes without changing
        # their numerics: probe_exactness, run by one decoder's thread before it serves (so
        # the load itself stays short), shared by all through `verdict`.
        self.verdict = verdict
        self._probe = probe
        self.exact = False
        self.cache = PrefixCache(n_seq)
        self._batch = TokenBatch(max(PREFILL_CHUNK * n_seq, n_seq) + n_seq)
        self._batch_freed = False
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self._wake = threading.Condition()
        self._closing = False
        self.steps = 0
        self.last_job: Job | None = None
        self._thread = threading.Thread(target=self._loop, name="llama-batch", daemon=True)
        self._thread.start()

    # -- called from the event loop -------------------------------------------------------
    def submit(self, job: Job) -> None:
        with self._wake:
            if self._closing:
                raise EngineError(
                    "model_unloaded", "The model was unloaded; submit the request again."
                )
            self._waiting.append(job)
            self._wake.notify()

    def close(self) -> None:
        """Finish every submitted generation, then stop the thread (blocking)."""
        self.begin_close()
        self.join(None)

    def begin_close(self) -> None:
        """Refuse new generations; the thread ends once the submitted ones have finished."""
        with self._wake:
            self._closing = True
            self._wake.notify()

    def join(self, timeout: float | None) -> bool:
        """Wait (up to `timeout` seconds) for the thread to end, then free its batch; False
        when it is still running (and the batch is kept: the thread may still use it)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return False
        if not self._batch_freed:
            self._batch_freed = True
            self._batch.free()
        return True

    @property
    def active(self) -> int:
        return len(self._running) + len(self._waiting)

    # -- the batching thread --------------------------------------------------------------
    def _loop(self) -> None:
        if self._probe is not None:
            try:
                self.verdict.set(self._probe())
            except Exception:
                log.exception("the exactness probe failed; decoding sequences one at a time")
                self.verdict.set(False)
        self.exact = self.verdict.wait()
        while True:
            with self._wake:
                while not self._waiting and not self._running and not self._closing:
                    self._wake.wait()
                if self._closing and not self._waiting and not self._running:
                    return
                arrivals: list[Job] = []
                while self._waiting and len(self._running) + len(arrivals) < self.n_seq:
                    arrivals.append(self._waiting.popleft())
                cancelled = [j for j in self._waiting if j.channel.should_stop()]
                for job in cancelled:
                    self._waiting.remove(job)
            for job in cancelled:
                self._complete(job, job.finish("cancelled"))
            for job in arrivals:
                try:
                    self._admit(job)
                except Exception as exc:  # a bug or a native failure: fail this job only
                    log.exception("admitting a generation failed")
                    if job in self._running:
                        self._end(job, error=_engine_error(exc), keep_cache=False)
                    elif not job.done.done():
                        self._complete(job, error=_engine_error(exc))
            try:
                self._step()
            except Exception as exc:  # a native failure: fail what was running, keep serving
                log.exception("batched decode failed")
                for job in list(self._running):
                    self._end(job, error=_engine_error(exc), keep_cache=False)

    def _admit(self, job: Job) -> None:
        request = job.request
        if job.channel.should_stop():
            self._complete(job, job.finish("cancelled"))
            return
        limit = request.max_output_tokens
        job.position = len(request.resume_tokens)
        if limit is not None and job.position >= limit:
            self._complete(job, job.finish("length"))
            return
        try:
            job.grammar = open_constraint(
                self._vocab, self._n_vocab, request.grammar, request.resume_tokens
            )
        except EngineError as exc:
            self._complete(job, error=exc)
            return
        for token in request.resume_tokens:
            job.text.prime(self._token_bytes(token))
        wanted = job.prompt + list(request.resume_tokens)
        if len(wanted) > self.n_ctx_seq:
            # The earlier run filled the context: it ended there, and so does this one.
            self._complete(job, job.finish("context"))
            return
        claimed = self.cache.claim(wanted, reuse=self.exact)
        assert claimed is not None  # admission is limited to free sequences
        sequence, keep = claimed
        self._lc.llama_memory_seq_rm(self._memory, sequence.seq_id, keep, -1)
        job.sequence = sequence
        job.evaluated = wanted[:keep]
        # Only prompt tokens count as cached input: a resumed run's replayed output tokens
        # found in the cache are output, not input.
        job.cached = min(keep, len(job.prompt))
        job.pending = deque(self._chunks(job, keep))
        self._running.append(job)
        self.last_job = job

    def _chunks(self, job: Job, keep: int) -> list[list[int]]:
        """What to evaluate before the first sample. With exact batching every split gives
        the same numerics; otherwise the prompt is split at fixed positions and replayed
        tokens one by one, exactly as an uninterrupted run evaluated them."""
        prompt, resume = job.prompt, job.request.resume_tokens
        if self.exact:
            rest = (prompt + list(resume))[keep:]
            return [rest[i : i + PREFILL_CHUNK] for i in range(0, len(rest), PREFILL_CHUNK)]
        chunks = [prompt[i : i + PREFILL_CHUNK] for i in range(0, len(prompt), PREFILL_CHUNK)]
        return chunks + [[t] for t in resume]

    def _step(self) -> None:
        # A cancel (or refused sink) ends a generation before its next token is evaluated.
        for job in list(self._running):
            if job.channel.should_stop():
                self._end(job, job.finish("cancelled"))
        if not self._running:
            return
        generating = [j for j in self._running if not j.pending]
        reading = [j for j in self._running if j.pending]
        budget = PREFILL_BUDGET if generating else PREFILL_BUDGET * self.n_seq
        groups: list[list[tuple[Job, list[int]]]] = []
        shared: list[tuple[Job, list[int]]] = []
        for job in generating:
            assert job.next_token is not None
            shared.append((job, [job.next_token]))
        for job in reading:
            if budget <= 0:
                break
            chunk = job.pending[0]
            if len(chunk) > budget and (generating or shared):
                if self.exact and len(chunk) > 1:
                    # Split to the budget: any split gives the same numerics.
                    job.pending[0] = chunk[budget:]
                    job.pending.appendleft(chunk[:budget])
                else:
                    continue
            chunk = job.pending.popleft()
            budget -= len(chunk)
            shared.append((job, chunk))
        if self.exact:
            groups.append(shared)
        else:
            groups.extend([entry] for entry in shared)
        for group in groups:
            self._decode(group)
        self.steps += 1

    def _decode(self, group: list[tuple[Job, list[int]]]) -> None:
        batch = self._batch
        batch.clear()
        rows: list[tuple[Job, int]] = []
        for job, tokens in group:
            assert job.sequence is not None
            start = len(job.evaluated)
            wants_logits = not job.pending  # the last chunk (or a generated token)
            for i, token in enumerate(tokens):
                last = i == len(tokens) - 1
                index = batch.add(token, start + i, job.sequence.seq_id, last and wants_logits)
                if last and wants_logits:
                    rows.append((job, index))
        status = batch.decode(self._ctx)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        for job, tokens in group:
            job.evaluated.extend(tokens)
            job.next_token = None
        emitted: list[tuple[TokenChannel, TokenPiece]] = []
        for job, index in rows:
            self._sample(job, self._calls.logits_row(self._ctx, index, self._n_vocab), emitted)
        if emitted:
            emit_all(emitted[0][0].loop, emitted)

    def _sample(
        self,
        job: Job,
        logits: npt.NDArray[np.float32],
        emitted: list[tuple[TokenChannel, TokenPiece]],
    ) -> None:
        request = job.request
        if job.channel.should_stop():
            self._end(job, job.finish("cancelled"))
            return
        sample = functools.partial(
            sample_token,
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            seed=job.seed,
            position=job.position,
        )
        try:
            token = pick(job.grammar, logits, sample, greedy=request.temperature <= 0)
        except EngineError as exc:
            self._end(job, error=exc)
            return
        job.sampled += 1
        if self._is_eog(token):
            self._end(job, job.finish("stop"))
            return
        advance(job.grammar, token)
        emitted.append((job.channel, TokenPiece(token, job.text.feed(self._token_bytes(token)))))
        job.position += 1
        limit = request.max_output_tokens
        if limit is not None and job.position >= limit:
            self._end(job, job.finish("length"), emitted)
        elif len(job.evaluated) >= self.n_ctx_seq:
            self._end(job, job.finish("context"), emitted)
        else:
            job.next_token = token

    def _is_eog(self, token: int) -> bool:
        known = self._eog.get(token)
        if known is None:
            known = self._eog[token] = self._calls.is_eog(self._vocab, token)
        return known

    def _end(
        self,
        job: Job,
        outcome: LoopOutcome | None = None,
        emitted: list[tuple[TokenChannel, TokenPiece]] | None = None,
        *,
        error: BaseException | None = None,
        keep_cache: bool = True,
    ) -> None:
        """Leave the batch: the sequence keeps its tokens for the prefix cache."""
        self._running.remove(job)
        if job.sequence is not None:
            if keep_cache and error is None:
                self.cache.release(job.sequence, job.evaluated)
            else:
                self._lc.llama_memory_seq_rm(self._memory, job.sequence.seq_id, -1, -1)
                self.cache.forget(job.sequence)
        if emitted:
            # This step's tokens must reach the loop before the channel closes.
            mine = [item for item in emitted if item[0] is job.channel]
            for item in mine:
                emitted.remove(item)
            emit_all(job.channel.loop, mine)
        self._complete(job, outcome, error=error)

    def _complete(
        self, job: Job, outcome: LoopOutcome | None = None, *, error: BaseException | None = None
    ) -> None:
        if job.grammar is not None:
            job.grammar.close()
        if error is not None:
            job.done.set_exception(error)
        else:
            assert outcome is not None
            job.done.set_result(outcome)
        job.channel.close()


def _engine_error(exc: Exception) -> EngineError:
    return EngineError("engine_error", f"llama.cpp failed during generation ({exc}).")


def probe_exactness(ctx: Any, vocab: Any, n_seq: int, tokens: list[int]) -> bool:
    """Whether this model's numerics allow sharing decodes and reusing prefixes exactly:
    the logits after `tokens` read as one chunk equal those read one token at a time, and
    the next token's logits do not change when another sequence shares its decode."""
    lc = lowlevel()
    memory = lc.llama_get_memory(ctx)
    n_vocab = int(lc.llama_vocab_n_tokens(vocab))
    batch = TokenBatch(len(tokens) + 2)
    chunk, last = tokens[:-1], tokens[-1]

    def decode() -> None:
        if batch.decode(ctx) != 0:
            raise RuntimeError("llama_decode failed in the exactness probe")

    try:
        lc.llama_memory_clear(memory, False)
        batch.clear()
        for i, token in enumerate(chunk):
            batch.add(token, i, 0, i == len(chunk) - 1)
        decode()
        chunked = logits_row(ctx, len(chunk) - 1, n_vocab)
        batch.clear()
        batch.add(last, len(chunk), 0, True)
        decode()
        chunked_next = logits_row(ctx, 0, n_vocab)

        lc.llama_memory_clear(memory, False)
        for i, token in enumerate(chunk):
            batch.clear()
            batch.add(token, i, 0, i == len(chunk) - 1)
            decode()
        single = logits_row(ctx, 0, n_vocab)
        batch.clear()
        batch.add(last, len(chunk), 0, True)
        if n_seq > 1:
            batch.add(tokens[0], 0, 1, True)  # a neighbour in the same decode
        decode()
        single_next = logits_row(ctx, 0, n_vocab)
        return bool(np.array_equal(chunked, single) and np.array_equal(chunked_next, single_next))
    finally:
        lc.llama_memory_clear(memory, False)
        batch.free()
