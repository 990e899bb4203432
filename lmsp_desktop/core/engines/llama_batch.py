"""Continuous batching: one thread decodes every running generation of a context together.

Each step evaluates one token of every generating sequence in one llama_decode, then one
chunk of a prompt still being read in a llama_decode of its own; new generations join
between steps, and a cancelled one leaves before its next token is evaluated or sampled.
A prompt chunk is read on every core while the model's other contexts wait, and between
two chunks every generating sequence of the model gets its token (prompt priority,
llama_cores.Cores): up to n_batch tokens per chunk while nothing generates, SHARED_CHUNK
while something does, so the prompt is read at full speed and the streams keep moving.

Exactness (resume byte-identical). With flash attention off (llama_native.open_context),
llama.cpp computes a token read in a chunk of two or more tokens the same whatever the
chunk's size, boundaries, thread count and batch neighbours, and a token read alone the
same whatever its neighbours; the two differ from each other. So: prompts are only ever
read in chunks of two or more tokens, generated tokens one at a time, and a resumed run
replays its generated tokens one at a time after reading the prompt in chunks - the very
numerics of the first run. The prefix cache reuses only what was read as prompt chunks.
`probe_exactness` checks these properties at load (the demo model passes, see
docs/prefill.md); a model that fails is decoded one sequence at a time, its prompts in
chunks at fixed positions, on one thread, without prefix reuse.
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

from lmsp_desktop.core.engines.base import (
    EngineError,
    FinishReason,
    GenerationRequest,
    PromptProgress,
    TokenPiece,
)
from lmsp_desktop.core.engines.grammar import GrammarConstraint, advance, open_constraint, pick
from lmsp_desktop.core.engines.llama_cores import Cores
from lmsp_desktop.core.engines.llama_native import (
    GilHoldingCalls,
    TokenBatch,
    lowlevel,
)
from lmsp_desktop.core.engines.llama_probe import Verdict
from lmsp_desktop.core.engines.prefix_cache import CachedSequence, PrefixCache
from lmsp_desktop.core.engines.pump import LoopOutcome, TokenChannel, emit_all
from lmsp_desktop.core.engines.sampling import Utf8Stream, sample_token

log = logging.getLogger(__name__)

# Prompt tokens per chunk while sequences of the model generate: their steps between two
# chunks cost a few per cent of the prompt's time, and they get a token per chunk (about
# one a second on 2 cores at 2k tokens), see docs/prefill.md.
SHARED_CHUNK = 128
# llama_decode's answer when the abort callback stopped it.
_ABORTED = 2
# A model that fails the exactness probe reads prompts in chunks of this size at fixed
# positions (0, 64, 128, ...), in the first run and in every resumed one alike.
FIXED_CHUNK = 64


@dataclass
class Job:
    """One generation inside the batching thread."""

    request: GenerationRequest
    channel: TokenChannel
    seed: int
    prompt: list[int]
    done: concurrent.futures.Future[LoopOutcome]
    sequence: CachedSequence | None = None
    reading: list[int] = field(default_factory=list)  # prompt tokens still to read
    replay: deque[int] = field(default_factory=deque)  # a resumed run's tokens to re-evaluate
    evaluated: list[int] = field(default_factory=list)  # tokens in the sequence's cache
    chunked: int = 0  # leading tokens of `evaluated` read as prompt chunks
    next_token: int | None = None  # sampled, emitted, not yet evaluated
    position: int = 0  # output position of the next sampled token
    sampled: int = 0
    text: Utf8Stream = field(default_factory=Utf8Stream)
    grammar: GrammarConstraint | None = None
    cached: int = 0  # prompt tokens the claimed sequence already held (not evaluated)
    ticket: int = 0  # the prompt's place in the model's reading order (Cores)
    began: bool = False  # its prompt's first chunk is being read (no longer waiting)

    def finish(self, reason: FinishReason) -> LoopOutcome:
        return LoopOutcome(
            reason, input_tokens=len(self.prompt), seed_used=self.seed, cached_tokens=self.cached
        )


class BatchDecoder:
    """Owns a llama.cpp context of `n_seq` sequences and the thread that decodes them.
    `n_batch`: the most prompt tokens one decode reads; `threads`: the context's own thread
    count; `cores` (shared by the model's contexts) lends it all cores for prompt chunks."""

    def __init__(
        self,
        ctx: Any,
        vocab: Any,
        *,
        n_seq: int,
        n_ctx_seq: int,
        n_batch: int,
        threads: int,
        cores: Cores,
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
        self.n_batch = max(2, n_batch)
        self._threads = threads
        self._threads_now = -1  # set before the first decode (the probe changes it)
        self._cores = cores
        self._token_bytes = token_bytes
        # Whether sequences may share a decode, reuse cached prefixes and read prompts in
        # chunks of any size on any thread count without changing their numerics:
        # probe_exactness, run by one decoder's thread before it serves (so the load itself
        # stays short), shared by all through `verdict`.
        self.verdict = verdict
        self._probe = probe
        self.exact = False
        self.cache = PrefixCache(n_seq)
        self._batch = TokenBatch(self.n_batch + n_seq)
        self._batch_freed = False
        # A cancel stops a prompt chunk mid-way: llama.cpp asks this between two operations
        # of the chunk's graph (set for prompt chunks only: a Python call per operation
        # would cost the per-token decodes their speed). Kept here so it outlives the calls.
        self._abort_check = self._lc.ggml_abort_callback(self._chunk_cancelled)
        self._no_abort = self._lc.ggml_abort_callback()  # null: llama.cpp checks nothing
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self._wake = threading.Condition()
        self._closing = False
        self.steps = 0  # turns of the decoding loop
        self.decodes = 0  # llama_decode calls (a step shared by its sequences makes one)
        self.wide_chunks = 0  # prompt chunks read on all cores
        self.aborted_chunks = 0  # prompt chunks a cancel stopped part-way
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
                if not self._waiting and not self._running:
                    # Idle: no other context waits for this one's step any more.
                    self._cores.state(id(self), streaming=False, ticket=None)
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
        # At least the prompt's last two tokens are read again: a chunk of one token would
        # be computed as a generated token is (see the module docstring).
        claimed = self.cache.claim(wanted, reuse=self.exact, limit=len(job.prompt) - 2)
        assert claimed is not None  # admission is limited to free sequences
        sequence, keep = claimed
        self._lc.llama_memory_seq_rm(self._memory, sequence.seq_id, keep, -1)
        job.sequence = sequence
        job.evaluated = wanted[:keep]
        job.chunked = keep
        job.cached = keep
        job.reading = job.prompt[keep:]
        job.replay = deque(request.resume_tokens)
        job.ticket = self._cores.ticket()
        self._running.append(job)
        self.last_job = job
        # Admitted, its cached part known; its read waits for its turn (readers in order).
        job.channel.report_prompt(
            PromptProgress(len(job.prompt), keep, keep, waiting=bool(job.reading))
        )

    def _step(self) -> None:
        # A cancel (or refused sink) ends a generation before its next token is evaluated.
        for job in list(self._running):
            if job.channel.should_stop():
                self._end(job, job.finish("cancelled"))
        me = id(self)
        singles = [j for j in self._running if not j.reading]
        readers = [j for j in self._running if j.reading]  # in the order they joined
        first = readers[0].ticket if readers else None
        self._cores.state(me, streaming=bool(singles), ticket=first)
        if not self._running:
            return
        if singles:
            # One token each; while another context reads a prompt, one step per chunk.
            if not self._cores.begin_step(me, self._interrupted):
                return  # a cancel: the next step ends it
            try:
                groups = [singles] if self.exact else [[job] for job in singles]
                for group in groups:
                    self._decode_singles(group)
            finally:
                self._cores.end_step(me)
        readers = [j for j in self._running if j.reading]
        if readers and self._cores.begin_chunk(
            me, wait_turn=not singles, interrupted=self._interrupted
        ):
            try:
                # Small chunks while sequences generate, so they keep streaming.
                limit = SHARED_CHUNK if self._cores.streaming() else self.n_batch
                self._read_chunk(readers[0], limit)
            finally:
                self._cores.end_chunk(me)
        self.steps += 1

    def _interrupted(self) -> bool:
        """Whether a sequence of this context was cancelled (asked while it waits its turn
        for the cores, and by llama.cpp while it reads a chunk)."""
        return any(job.channel.should_stop() for job in self._running)

    def _decode_singles(self, group: list[Job]) -> None:
        """One token of each job: the next replayed token, or the last sampled one."""
        batch = self._batch
        batch.clear()
        rows: list[tuple[Job, int]] = []
        for job in group:
            assert job.sequence is not None
            token = job.replay.popleft() if job.replay else job.next_token
            assert token is not None
            wants_logits = not job.replay  # the last replayed token or a generated one
            index = batch.add(token, len(job.evaluated), job.sequence.seq_id, wants_logits)
            job.evaluated.append(token)
            job.next_token = None
            if wants_logits:
                rows.append((job, index))
        self._run(batch, self._threads)
        self._sample_rows(rows)

    def _read_chunk(self, job: Job, limit: int) -> None:
        """Read the next chunk of the job's prompt: never a single token (unless the whole
        prompt is one), at fixed positions when the model failed the probe. A cancel ends
        the job between chunks or, through llama.cpp's abort callback, inside one."""
        assert job.sequence is not None
        if job.channel.should_stop():  # cancelled while this step's other decode ran
            self._end(job, job.finish("cancelled"))
            return
        rest = len(job.reading)
        if not self.exact:
            size = FIXED_CHUNK - len(job.evaluated) % FIXED_CHUNK
        else:
            size = min(limit, self.n_batch)
            if rest - size == 1:
                size -= 1  # leave two for the last chunk
        if not job.began:  # its own read begins: said at once, whatever the throttle
            job.began = True
            job.channel.report_prompt(
                PromptProgress(len(job.prompt), job.cached, len(job.evaluated)), always=True
            )
        chunk, job.reading = job.reading[:size], job.reading[size:]
        wants_logits = not job.reading and not job.replay
        batch = self._batch
        batch.clear()
        start = len(job.evaluated)
        index = -1
        for i, token in enumerate(chunk):
            last = i == len(chunk) - 1
            index = batch.add(token, start + i, job.sequence.seq_id, last and wants_logits)
        # The model's other contexts wait while a chunk is read (Cores): every core.
        wide = self.exact and len(chunk) > 1
        if not self._run(batch, self._cores.count if wide else self._threads, abortable=True):
            # A cancel stopped it mid-chunk: llama.cpp removed the chunk's cells (said again
            # here so the sequence surely holds only what `evaluated` says).
            self._lc.llama_memory_seq_rm(self._memory, job.sequence.seq_id, start, -1)
            self.aborted_chunks += 1
            if job.channel.should_stop():
                # The job ends with the tokens read before this chunk (the prefix cache
                # may reuse them).
                self._end(job, job.finish("cancelled"))
            else:
                # A neighbour's cancel: it leaves at the next step, and the chunk is read
                # again (its boundaries do not change its numerics).
                job.reading = chunk + job.reading
            return
        self.wide_chunks += wide
        job.evaluated.extend(chunk)
        job.chunked = len(job.evaluated)
        if job.reading:  # how far it is (throttled); the end shows as the first token
            job.channel.report_prompt(
                PromptProgress(len(job.prompt), job.cached, len(job.evaluated))
            )
        if wants_logits:
            self._sample_rows([(job, index)])

    def _run(self, batch: TokenBatch, threads: int, abortable: bool = False) -> bool:
        """Decode `batch`; False when, `abortable`, a sequence of the context was cancelled
        during the decode and llama.cpp stopped it part-way (and dropped the batch's cells)."""
        self.decodes += 1
        if threads != self._threads_now:
            # Only on a change: a ctypes call releases the GIL and may wait a switch interval
            # to take it back while the event loop runs (see GilHoldingCalls).
            self._lc.llama_set_n_threads(self._ctx, threads, threads)
            self._threads_now = threads
        if not abortable:
            status = batch.decode(self._ctx)
        else:
            self._lc.llama_set_abort_callback(self._ctx, self._abort_check, None)
            try:
                status = batch.decode(self._ctx)
            finally:
                self._lc.llama_set_abort_callback(self._ctx, self._no_abort, None)
            if status == _ABORTED:
                return False
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        return True

    def _chunk_cancelled(self, _data: Any) -> bool:
        """llama.cpp's abort callback (its decoding thread, between graph operations): the
        chunk's own sequence, or a neighbour in this context waiting for its next token."""
        return self._interrupted()

    def _sample_rows(self, rows: list[tuple[Job, int]]) -> None:
        emitted: list[tuple[TokenChannel, TokenPiece]] = []
        for job, index in rows:
            # Sampled before this thread's next decode overwrites the row.
            self._sample(job, self._calls.logits_view(self._ctx, index, self._n_vocab), emitted)
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
                self.cache.release(job.sequence, job.evaluated, job.chunked)
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
