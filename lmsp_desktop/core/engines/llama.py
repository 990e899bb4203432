"""The llama.cpp engine (llama-cpp-python's low-level API): loads a GGUF model's weights
once and serves several generations from them at the same time.

One context holds `parallel` sequences, each with its own KV cache; one thread decodes all
running generations together, one llama_decode per step (core/engines/llama_batch.py). An
extra concurrent request costs its KV cache, never another copy of the weights. A finished
generation leaves its tokens cached, so the next turn of a conversation (same system
prompt, same history) evaluates only what is new (core/engines/prefix_cache.py).

Exact resume: generated tokens are evaluated one per decode, prompts in chunks of two or
more tokens, sampling is a function of (seed, position), and the batch decoder keeps a
sequence's numerics independent of its neighbours, of thread counts and of how its prompt
was split (checked at load, see llama_batch.py and docs/prefill.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines import llama_native as native
from lmsp_desktop.core.engines.base import (
    ContextShape,
    EmbeddingRequest,
    EmbeddingResult,
    EngineError,
    GenerationRequest,
    GenerationResult,
    KvType,
    LoadSettings,
    ProgressSink,
    PromptProgress,
    TokenSink,
)
from lmsp_desktop.core.engines.llama_batch import BatchDecoder, Job
from lmsp_desktop.core.engines.llama_chat import ChatRenderer
from lmsp_desktop.core.engines.llama_cores import Cores
from lmsp_desktop.core.engines.llama_embed import (
    POOLING_NAMES,
    EmbeddingContext,
    context_limit,
    context_sizes,
    declared_pooling,
)
from lmsp_desktop.core.engines.llama_layout import DEFAULT_THREADS, LlamaLayout
from lmsp_desktop.core.engines.llama_probe import Verdict, probe_exactness
from lmsp_desktop.core.engines.prefix_cache import PrefixStats
from lmsp_desktop.core.engines.pump import LoopOutcome, TokenChannel, check_request, pump_started
from lmsp_desktop.core.engines.raw_prompt import fim_tokens, raw_prompt_tokens
from lmsp_desktop.core.engines.sampling import new_seed
from lmsp_desktop.core.errors import LmspError

log = logging.getLogger(__name__)
# How a load runs its exactness probe when given one (verdicts.probe_once): called with the
# probe, answers the verdict.
RunProbe = Callable[[Callable[[], bool]], bool]
# A cached prefix this long is worth waiting in a busier context for (see _choose).
LONG_PREFIX = 256
# How long an unload waits for the threads still using the model (decoding, tokenizing a
# prompt) before it gives up freeing it: a bound on a hang, the memory then goes with the
# process.
RELEASE_WAIT_S = 60.0
PROBE_TEXT = "The lighthouse keeper climbed the stairs as the storm rolled in from the sea. "
# Long enough for llama.cpp's kernels for larger batches (flash attention switches at 64).
PROBE_TOKENS = 80


class LlamaEngine(LlamaLayout):
    """Loads GGUF files with llama.cpp. `n_ctx` caps each sequence's context (the model's own
    training context is used when it is smaller); `n_threads` is each context's thread count
    (a prompt read while the model's other contexts are idle uses every core); `n_batch` is
    the most prompt tokens one decode reads; `parallel` is how many requests one loaded
    model serves at once."""

    async def load(
        self,
        path: Path,
        progress: ProgressSink | None = None,
        *,
        settings: LoadSettings | None = None,
        exact: bool | None = None,
        run_probe: RunProbe | None = None,
    ) -> LlamaModel:
        """`settings.context_length`: each sequence's context (the service passes what the
        memory planner chose); `n_ctx` when not given, and never past the trained length.
        `settings.parallel`: sequences (else `parallel`); kv type and GPU layers as given.
        `exact`: the exactness probe's verdict from an earlier load of the same file with
        the same settings on this machine (LlamaModel.exact_verdict), which skips the probe;
        None runs it, through `run_probe` when given (the worker's: verdicts.probe_once, so
        that two processes loading the same file at once probe it once)."""
        loop = asyncio.get_running_loop()
        settings = self._complete(settings)

        last = [0.0]

        def report(value: float) -> None:
            # llama.cpp calls back once per tensor; a 1 % step is plenty for a progress bar.
            if progress is not None and (value - last[0] >= 0.01 or value >= 1.0 > last[0]):
                last[0] = value
                loop.call_soon_threadsafe(progress, value)

        if progress is not None:
            progress(0.0)
        loading = asyncio.ensure_future(
            asyncio.to_thread(self._load_sync, Path(path), report, settings, exact, run_probe)
        )
        try:
            model = await asyncio.shield(loading)
        except asyncio.CancelledError:
            # A cancelled wait (the service stopping) does not stop the loading thread: free
            # what it makes, so no llama.cpp thread outlives the shutdown (a crash at exit).
            log.debug("loading %s was cut short: waiting for its thread to end", path)
            try:
                await (await asyncio.shield(loading)).unload()
            except Exception:
                log.warning("a model load cut short by shutdown ended badly", exc_info=True)
            raise
        if progress is not None:
            progress(1.0)
        return model

    def _load_sync(
        self,
        path: Path,
        report: ProgressSink,
        settings: LoadSettings,
        exact: bool | None,
        run_probe: RunProbe | None,
    ) -> LlamaModel:
        if not path.is_file():
            raise EngineError(
                "model_file_missing",
                f"The model file {path} does not exist any more; rescan the model folders.",
            )
        lc = native.lowlevel()
        try:
            weights = native.load_model(path, report, gpu_layers=settings.gpu_layers)
        except Exception as exc:
            raise EngineError(
                "model_load_failed",
                f"llama.cpp could not load {path.name} ({exc}). Check that it is a complete "
                "GGUF file of an architecture this llama.cpp build supports.",
            ) from exc
        contexts: list[Any] = []
        try:
            trained = int(lc.llama_model_n_ctx_train(weights))
            # Past its training context a model degrades: never ask for more.
            wanted = settings.context_length or self.n_ctx
            n_ctx = min(wanted, trained) if trained > 0 else wanted
            shapes = self.context_shapes(dataclasses.replace(settings, context_length=n_ctx))

            def open_context(shape: ContextShape) -> Any:
                return native.open_context(
                    weights,
                    n_ctx_seq=shape.n_ctx_seq,
                    n_seq=shape.n_seq,
                    n_threads=self.n_threads,
                    n_batch=shape.n_batch,
                    kv_type=settings.kv_type,
                    flash_attn=settings.flash_attn,
                )

            now = shapes[:1] if self.contexts_on_demand else shapes
            for shape in now:
                contexts.append(open_context(shape))
        except Exception as exc:
            for ctx in contexts:
                lc.llama_free(ctx)
            lc.llama_model_free(weights)
            raise EngineError(
                "model_load_failed",
                f"llama.cpp could not create a context for {path.name} ({exc}); lower the "
                "concurrent requests per model or the context length.",
            ) from exc
        return LlamaModel(
            weights,
            [(ctx, shape.n_seq) for ctx, shape in zip(contexts, shapes, strict=False)],
            path=path,
            n_ctx=n_ctx,
            n_threads=self.n_threads,
            n_batch=max(self.n_batch, 2),
            exact=exact,
            run_probe=run_probe,
            later=shapes[len(contexts) :],
            open_context=open_context,
            room=MemoryRoom(path, settings.kv_type),
        )


class MemoryRoom:
    """Whether a context opened after the load fits the memory available at that moment
    (other models may have loaded since this one's plan counted it): another decoding
    context when a second request comes, the embedding context at the first embedding. The
    fitter's own estimate and budget (core/models/memory.py), from the file's header, read
    the first time it is asked (a model asked one thing at a time never is) and kept. Each
    answer is why it does not fit, or "" when it does (or cannot be known)."""

    def __init__(self, path: Path, kv_type: KvType) -> None:
        self.path = path
        self.kv_type = kv_type
        self._shape: Any = None

    def context(self, ctx: ContextShape) -> str:
        from lmsp_desktop.core.models.memory import context_refusal

        return self._ask(lambda shape, budget: context_refusal(shape, ctx, self.kv_type, budget))

    def embedding(self, n_ctx: int, optional: bool = False) -> str:
        from lmsp_desktop.core.models.memory import embedding_refusal

        return self._ask(lambda shape, budget: embedding_refusal(shape, n_ctx, budget, optional))

    def _ask(self, refusal: Callable[[Any, Any], str]) -> str:
        from lmsp_desktop.core.models import machine
        from lmsp_desktop.core.models.gguf_meta import read_gguf_meta
        from lmsp_desktop.core.models.memory import Budget, ModelShape

        if self._shape is None:
            try:
                self._shape = ModelShape.from_gguf(
                    read_gguf_meta(self.path), self.path.stat().st_size
                )
            except (OSError, ValueError) as exc:  # replaced or gone since the load
                log.warning("%s: no memory estimate for a new context (%s)", self.path.name, exc)
                return ""
        host = machine.host_memory()
        return refusal(self._shape, Budget(host.total, host.available, host.source))


class LlamaModel:
    """A loaded llama.cpp model serving up to `parallel` generations at once: one copy of the
    weights, one or more contexts over it, each decoding its sequences in its own thread."""

    def __init__(
        self,
        weights: Any,
        contexts: list[tuple[Any, int]],
        *,
        path: Path,
        n_ctx: int,
        n_threads: int = DEFAULT_THREADS,
        n_batch: int = 512,
        exact: bool | None = None,
        run_probe: RunProbe | None = None,
        later: list[ContextShape] | None = None,
        open_context: Callable[[ContextShape], Any] | None = None,
        room: MemoryRoom | None = None,
    ) -> None:
        """`contexts`: the open ones, each with its sequence count; `later`: the contexts
        `open_context` opens when a request finds every open one busy (_open_next), unless
        `room` says the memory has none for one now (nor for the embedding context)."""
        self._lc = native.lowlevel()
        self._weights: Any = weights
        self.path = path
        self.context_length = n_ctx
        self._later = list(later or [])
        self._open_context = open_context
        self._room = room
        self._opening = threading.Lock()
        self._short = False  # a context could not open: said once until one does
        self.parallel = sum(n_seq for _ctx, n_seq in contexts) + sum(s.n_seq for s in self._later)
        self._vocab = self._lc.llama_model_get_vocab(weights)
        self._n_vocab = int(self._lc.llama_vocab_n_tokens(self._vocab))
        self._pieces: dict[int, bytes] = {}
        self._pieces_lock = threading.Lock()
        self.metadata = native.model_metadata(weights)
        self._renderer = ChatRenderer(
            self.metadata.get("tokenizer.chat_template"),
            bos_token=self._token_text(int(self._lc.llama_vocab_bos(self._vocab))),
            eos_token=self._token_text(int(self._lc.llama_vocab_eos(self._vocab))),
        )
        probe_tokens = self.tokenize_prompt(PROBE_TEXT * 8)[: min(PROBE_TOKENS, n_ctx - 1)]
        first_ctx, first_n_seq = contexts[0]
        self._verdict = Verdict()
        cores = Cores(os.cpu_count() or 1)

        def probe() -> bool:
            def run() -> bool:
                return probe_exactness(
                    first_ctx, self._vocab, first_n_seq, probe_tokens, cores.count
                )

            return run() if run_probe is None else run_probe(run)

        if exact is not None:
            # Known from an earlier load (the same file, settings and machine give the same
            # numerics): the probe reads 160 tokens, seconds on a busy machine, before the
            # first token; a resume after an engine crash must not pay it again (B17).
            self._verdict.set(exact)

        self._contexts = [ctx for ctx, _n in contexts]

        def decoder(ctx: Any, n_seq: int, probe: Callable[[], bool] | None) -> BatchDecoder:
            return BatchDecoder(
                ctx,
                self._vocab,
                n_seq=n_seq,
                n_ctx_seq=n_ctx,
                n_batch=n_batch,
                threads=n_threads,
                cores=cores,
                token_bytes=self.token_bytes,
                verdict=self._verdict,
                probe=probe,
            )

        self._decoder = decoder
        self._decoders: list[BatchDecoder] | None = [
            decoder(ctx, n_seq, probe if index == 0 and exact is None else None)
            for index, (ctx, n_seq) in enumerate(contexts)
        ]
        self._all_decoders = list(self._decoders)
        self._n_threads = n_threads
        # Opened by the first embedding asked of this model, kept until the unload.
        self._embedding: EmbeddingContext | None = None
        self._embedding_lock = threading.Lock()
        self._last_job: Job | None = None
        self._unloading = asyncio.Lock()
        # Threads other than the decoders' inside llama.cpp with this model (a prompt being
        # tokenized); the model is freed only once none is left.
        self._users = 0
        self._users_changed = threading.Condition()

    @property
    def exact_batching(self) -> bool:
        """Whether sequences share decodes and cached prefixes (the exactness probe, run by
        the first context's thread before it serves, passed); waits for the probe."""
        return self._verdict.wait()

    @property
    def exact_verdict(self) -> bool | None:
        """The exactness probe's verdict once known (None while it runs): what a later load
        of the same file with the same settings may be given instead of probing again."""
        return self._verdict.known()

    @property
    def prefix_stats(self) -> PrefixStats:
        """Prefix cache lookups, hits and tokens reused since the model was loaded."""
        total = PrefixStats()
        for decoder in self._all_decoders:
            total.add(decoder.cache.stats)
        return total

    @property
    def steps(self) -> int:
        """Decoding-loop turns so far, all contexts together."""
        return sum(decoder.steps for decoder in self._all_decoders)

    @property
    def decodes(self) -> int:
        """llama_decode calls so far, all contexts together."""
        return sum(decoder.decodes for decoder in self._all_decoders)

    @property
    def sampled_tokens(self) -> int:
        """Tokens sampled by the most recently started generation (end-of-turn included):
        lets tests check that a stop request ends it within one token."""
        return self._last_job.sampled if self._last_job is not None else 0

    # --- prompt -------------------------------------------------------------------------

    def render_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text the messages (and tools) become through the model's chat template."""
        return self._renderer.render(messages, tools)

    def tokenize_prompt(self, prompt: str) -> list[int]:
        # Templates that print the BOS token themselves must not get a second one.
        add_bos = bool(self._lc.llama_vocab_get_add_bos(self._vocab)) and not (
            self._renderer.bos_token and prompt.startswith(self._renderer.bos_token)
        )
        return native.tokenize(self._vocab, prompt, add_bos=add_bos)

    def _raw_tokens(self, prompt: str | list[int], suffix: str | None) -> list[int]:
        try:
            tokens = raw_prompt_tokens(
                lambda text, bos: native.tokenize(self._vocab, text, add_bos=bos),
                prompt,
                suffix,
                fim_tokens(self._lc, self._vocab),
                bool(self._lc.llama_vocab_get_add_bos(self._vocab)),
                self._n_vocab,
            )
        except LmspError as exc:  # no FIM tokens: the same refusal as at admission
            raise EngineError("invalid_input", exc.message) from None
        if tokens:
            return tokens
        # An empty prompt of a model that adds no BOS itself: nothing to continue. OpenAI
        # generates "as if from the beginning of a new document", llama-server from the BOS
        # token alone: the model's beginning-of-text token (else its end-of-text one, the
        # document separator of GPT-2-style vocabularies).
        for start in (self._lc.llama_vocab_bos(self._vocab), self._lc.llama_vocab_eos(self._vocab)):
            if start >= 0:
                return [int(start)]
        raise EngineError(
            "invalid_input",
            "The prompt is empty and this model has no beginning-of-text token to start "
            "from; send some text to continue.",
        )

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (control tokens such as end-of-turn give b"")."""
        piece = self._pieces.get(token)
        if piece is None:
            piece = native.token_piece(self._vocab, token)
            with self._pieces_lock:
                self._pieces[token] = piece
        return piece

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        text = self._lc.llama_vocab_get_text(self._vocab, token)
        return text.decode("utf-8", errors="replace") if text else ""

    # --- generation ---------------------------------------------------------------------

    async def generate(self, request: GenerationRequest, sink: TokenSink) -> GenerationResult:
        check_request(request)
        self._require()
        seed = request.seed if request.seed is not None else new_seed()
        prompt = await asyncio.to_thread(self._prompt_tokens, request)
        if self._later and all(d.active for d in self._require()):
            await asyncio.to_thread(self._open_next)
        decoder = self._choose(prompt + list(request.resume_tokens))

        def start(channel: TokenChannel) -> concurrent.futures.Future[LoopOutcome]:
            done: concurrent.futures.Future[LoopOutcome] = concurrent.futures.Future()
            job = Job(request, channel, seed, prompt, done)
            # Its length is known now, before it waits for a sequence or another prompt's
            # chunk: the decoder reports the cached part, the read's beginning and its chunks.
            channel.deliver_prompt(PromptProgress(len(prompt), 0, 0, waiting=True))
            decoder.submit(job)
            self._last_job = job
            return done

        return await pump_started(request, sink, start)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """Pooled, normalised vectors of the inputs, in a thread (llama_embed.py)."""
        return await asyncio.to_thread(self._embed_sync, request)

    def _embed_sync(self, request: EmbeddingRequest) -> EmbeddingResult:
        with self._in_use():
            inputs = [
                self.tokenize_text(item) if isinstance(item, str) else list(item)
                for item in request.inputs
            ]
            limit = context_limit(self.context_length)
            for n, tokens in enumerate(inputs):
                if len(tokens) > limit:
                    raise EngineError(
                        "context_length_exceeded",
                        f"This model's maximum context length is {limit} tokens for an "
                        f"embedding input, but input {n} is {len(tokens)} tokens long; split "
                        "it into shorter pieces.",
                    )
            # One embedding at a time, from opening its context to its last decode: a
            # longer input's request frees the context to open a larger one.
            with self._embedding_lock:
                context = self._embedding_context([len(tokens) for tokens in inputs], limit)
                vectors = context.embed(inputs, request.cancel)
        return EmbeddingResult(
            vectors, sum(len(tokens) for tokens in inputs), POOLING_NAMES[context.pooling]
        )

    def _embedding_context(self, lengths: list[int], limit: int) -> EmbeddingContext:
        """The embedding context, opened at the size these inputs need (context_sizes) if
        the open one cannot hold the longest: the open one is freed first, then the size
        that holds them together if the memory keeps its reserve free beside it, else the
        size that holds the longest if the memory has it at all, else 507 (the worker goes
        on; a shorter input may still fit)."""
        context = self._embedding
        wanted, least = context_sizes(lengths, limit)
        if context is not None and context.n_ctx >= least:
            return context
        if context is not None:
            self._embedding = None
            context.free()
        n_ctx = wanted
        if wanted > least and self._room is not None and self._room.embedding(wanted, True):
            n_ctx = least
        why = self._room.embedding(n_ctx) if self._room is not None else ""
        if why:  # refused as a load that cannot fit: 507, the worker goes on
            raise EngineError("insufficient_memory", why)
        self._embedding = EmbeddingContext(
            self._weights,
            n_ctx=n_ctx,
            n_threads=self._n_threads,
            pooling=declared_pooling(self.metadata),
        )
        return self._embedding

    def tokenize_text(self, text: str) -> list[int]:
        """A plain text's tokens, as llama-cpp-python's Llama.tokenize gives them (BOS when
        the model wants one, special-token text left as text)."""
        add_bos = bool(self._lc.llama_vocab_get_add_bos(self._vocab))
        return native.tokenize(self._vocab, text, add_bos=add_bos, special=False)

    def _choose(self, tokens: list[int]) -> BatchDecoder:
        """The least busy context (each is one core's worth of decoding), the one whose idle
        sequence holds the longest prefix of `tokens` among equally busy ones; a context
        holding a long prefix (a long conversation) wins even when busier, if it has room,
        as evaluating that prefix again would cost more than the core it leaves idle."""
        decoders = self._require()
        if len(decoders) == 1:
            return decoders[0]

        def score(index: int) -> tuple[bool, int, int, int]:
            decoder = decoders[index]
            match = decoder.cache.idle_match(tokens) if decoder.active < decoder.n_seq else 0
            return (match >= LONG_PREFIX, -decoder.active, match, -index)

        return decoders[max(range(len(decoders)), key=score)]

    def _open_next(self) -> None:
        """Open the next context not opened at load, if every open one is still busy and the
        memory available now has room for it (other models may have loaded since this one's
        plan counted it): a request then decodes beside the others on a core of its own, as
        if it had been opened at load. Without the room, or when llama.cpp cannot open it,
        the requests share the open contexts' sequences (waiting for a free one, as on a
        model loaded with fewer contexts), the log says why, and the next request that finds
        every open context busy tries again."""
        with self._opening, self._in_use():
            if not self._later or not all(d.active for d in self._require()):
                return
            shape = self._later[0]
            assert self._open_context is not None
            ctx = None
            why = self._room.context(shape) if self._room is not None else ""
            if why:
                why = f"not opening another context now: {why}"
            else:
                try:
                    ctx = self._open_context(shape)
                except Exception as exc:
                    why = f"could not open another context ({exc})"
            if ctx is None:
                if not self._short:  # once until one opens, not a line per request
                    log.warning(
                        "%s: %s; requests wait for a free sequence of the open contexts, and a "
                        "later request tries again",
                        self.path.name,
                        why,
                    )
                self._short = True
                return
            if self._short:
                log.warning("%s: opened another context: the memory allows it now", self.path.name)
                self._short = False
            with self._users_changed:  # an unload takes the decoders under this lock
                if self._decoders is None:
                    self._lc.llama_free(ctx)
                    return
                self._later.pop(0)
                self._contexts.append(ctx)
                decoder = self._decoder(ctx, shape.n_seq, None)
                self._decoders.append(decoder)
                self._all_decoders.append(decoder)

    def _prompt_tokens(self, request: GenerationRequest) -> list[int]:
        with self._in_use():
            if request.prompt is not None:  # a legacy completion: no chat template
                prompt = self._raw_tokens(request.prompt, request.suffix)
            else:
                prompt = self.tokenize_prompt(self.render_prompt(request.messages, request.tools))
        if len(prompt) >= self.context_length:
            raise EngineError(
                "context_length_exceeded",
                f"This model's maximum context length is {self.context_length} tokens, but the "
                f"conversation is {len(prompt)} tokens long; shorten the input or start a new "
                "conversation.",
            )
        return prompt

    def _require(self) -> list[BatchDecoder]:
        if self._decoders is None:
            raise EngineError("model_unloaded", "The model was unloaded; submit the request again.")
        return self._decoders

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        """Use the model's native memory from a worker thread: refused once unloading began,
        and the unload waits until the block has ended (a generation cancelled while its
        prompt was being tokenized leaves that thread running: the service stopping)."""
        with self._users_changed:
            self._require()
            self._users += 1
        try:
            yield
        finally:
            with self._users_changed:
                self._users -= 1
                self._users_changed.notify_all()

    async def unload(self) -> None:
        """Free the model once every running generation and every thread still using it has
        ended. Cancelling the wait does not stop the freeing: it goes on in its thread."""
        async with self._unloading:
            with self._users_changed:  # no new user after this
                decoders, self._decoders = self._decoders, None
            if decoders is not None:
                await asyncio.to_thread(self._close, decoders)

    def _close(self, decoders: list[BatchDecoder]) -> None:
        """Stop the decoding threads, wait for the other users, then free. If any of them is
        still inside llama.cpp after RELEASE_WAIT_S, the memory is left to the process exit:
        freeing it under a running call is what crashed the service at shutdown."""
        deadline = time.monotonic() + RELEASE_WAIT_S
        for decoder in decoders:
            decoder.begin_close()
        stopped = all([d.join(max(0.0, deadline - time.monotonic())) for d in decoders])
        with self._users_changed:
            if self._users:
                log.debug("unloading %s waits for %d threads using it", self.path.name, self._users)
            idle = self._users_changed.wait_for(
                lambda: self._users == 0, max(0.0, deadline - time.monotonic())
            )
        if not (stopped and idle):
            log.error(
                "unloading %s: a thread was still inside llama.cpp after %.0f s; its memory is "
                "left to the process exit instead of freed under it",
                self.path.name,
                RELEASE_WAIT_S,
            )
            return
        for ctx in self._contexts:
            self._lc.llama_free(ctx)
        if self._embedding is not None:
            self._embedding.free()
        self._lc.llama_model_free(self._weights)
