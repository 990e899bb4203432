"""The llama.cpp engine (llama-cpp-python): loads GGUF models, generates token by token.

Every sampled token is evaluated by itself (batch size 1), and a resumed run replays the
tokens of the earlier run the same way, because evaluating them as one batch changes the
numerics (DESIGN.md, stack facts); with sampling a function of (seed, position), a resumed
run then continues exactly where the interrupted one would have gone.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import importlib
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lmsp_desktop.core.engines.base import (
    EngineError,
    GenerationRequest,
    GenerationResult,
    ProgressSink,
    TokenPiece,
    TokenSink,
)
from lmsp_desktop.core.engines.grammar import advance, open_constraint, pick
from lmsp_desktop.core.engines.llama_chat import ChatRenderer
from lmsp_desktop.core.engines.pump import LoopOutcome, TokenChannel, check_request, pump
from lmsp_desktop.core.engines.sampling import Utf8Stream, new_seed, sample_token

DEFAULT_CONTEXT = 4096
DEFAULT_THREADS = 2

# Loads that report progress swap llama_cpp's default-params factory for a moment (Llama()
# offers no other way to pass a progress callback); the lock keeps two loads from racing.
_LOAD_LOCK = threading.Lock()


def _lowlevel() -> Any:
    """llama_cpp's ctypes bindings, imported late: the package has no usable type stubs and
    loads a native library, which code that never runs a model should not pay for."""
    return importlib.import_module("llama_cpp.llama_cpp")


def _open_llama(path: Path, n_ctx: int, n_threads: int, n_batch: int, report: ProgressSink) -> Any:
    lc = _lowlevel()
    llama_module: Any = importlib.import_module("llama_cpp")

    def on_progress(value: float, _user_data: Any) -> bool:
        try:
            report(min(max(float(value), 0.0), 1.0))
        except Exception:
            pass  # progress is cosmetic: never abort a load over it
        return True

    callback = lc.llama_progress_callback(on_progress)
    with _LOAD_LOCK:
        original = lc.llama_model_default_params

        def params_with_progress() -> Any:
            params = original()
            params.progress_callback = callback
            return params

        lc.llama_model_default_params = params_with_progress
        try:
            return llama_module.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_batch=min(n_batch, n_ctx),
                n_threads=n_threads,
                n_threads_batch=n_threads,
                verbose=False,
            )
        finally:
            lc.llama_model_default_params = original


class LlamaEngine:
    """Loads GGUF files with llama.cpp. `n_ctx` caps the context (the model's own training
    context is used when it is smaller); `n_threads` is used for prompt and tokens alike."""

    def __init__(
        self, n_ctx: int = DEFAULT_CONTEXT, n_threads: int = DEFAULT_THREADS, n_batch: int = 512
    ) -> None:
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.n_batch = n_batch

    async def load(self, path: Path, progress: ProgressSink | None = None) -> LlamaModel:
        loop = asyncio.get_running_loop()

        last = [0.0]

        def report(value: float) -> None:
            # llama.cpp calls back once per tensor; a 1 % step is plenty for a progress bar.
            if progress is not None and (value - last[0] >= 0.01 or value >= 1.0 > last[0]):
                last[0] = value
                loop.call_soon_threadsafe(progress, value)

        if progress is not None:
            progress(0.0)
        llm = await asyncio.to_thread(self._load_sync, Path(path), report)
        model = LlamaModel(llm, path=Path(path))
        if progress is not None:
            progress(1.0)
        return model

    def _load_sync(self, path: Path, report: ProgressSink) -> Any:
        if not path.is_file():
            raise EngineError(
                "model_file_missing",
                f"The model file {path} does not exist any more; rescan the model folders.",
            )
        try:
            llm = _open_llama(path, self.n_ctx, self.n_threads, self.n_batch, report)
            trained = int(_lowlevel().llama_model_n_ctx_train(llm.model))
            if 0 < trained < self.n_ctx:
                # Past its training context a model degrades: reopen with its own limit
                # (mmap makes the second open cheap).
                llm.close()
                llm = _open_llama(path, trained, self.n_threads, self.n_batch, report)
        except EngineError:
            raise
        except Exception as exc:
            raise EngineError(
                "model_load_failed",
                f"llama.cpp could not load {path.name} ({exc}). Check that it is a complete "
                "GGUF file of an architecture this llama.cpp build supports.",
            ) from exc
        return llm


class LlamaModel:
    """A loaded llama.cpp model; one generation at a time."""

    def __init__(self, llm: Any, path: Path) -> None:
        self._llm: Any = llm
        self.path = path
        # llama.cpp may round the context up (to a multiple of 256), but Llama's own token
        # buffer keeps the size that was asked for: the smaller one is the real limit.
        self.context_length = min(int(llm.n_ctx()), len(llm.input_ids))
        self._lc = _lowlevel()
        self._vocab = self._lc.llama_model_get_vocab(llm.model)
        self._n_vocab = int(llm.n_vocab())
        self._pieces: dict[int, bytes] = {}
        # Tokens sampled by the current or last generation (end-of-turn included): lets
        # tests check that a stop request ends the loop within one token.
        self.sampled_tokens = 0
        metadata: dict[str, str] = dict(llm.metadata)
        self.metadata = metadata
        bos_id, eos_id = int(llm.token_bos()), int(llm.token_eos())
        self._renderer = ChatRenderer(
            metadata.get("tokenizer.chat_template"),
            bos_token=self._token_text(bos_id),
            eos_token=self._token_text(eos_id),
        )
        self._lock = asyncio.Lock()
        # Guards the native context across threads even if a cancelled caller stops waiting.
        self._native = threading.Lock()

    # --- prompt -------------------------------------------------------------------------

    def render_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text the messages (and tools) become through the model's chat template."""
        return self._renderer.render(messages, tools)

    def tokenize_prompt(self, prompt: str) -> list[int]:
        llm = self._require()
        # Templates that print the BOS token themselves must not get a second one.
        add_bos = bool(self._lc.llama_vocab_get_add_bos(self._vocab)) and not (
            self._renderer.bos_token and prompt.startswith(self._renderer.bos_token)
        )
        return [int(t) for t in llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)]

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for (control tokens such as end-of-turn give b"")."""
        piece = self._pieces.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = int(self._lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False))
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = int(self._lc.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False))
            piece = buf.raw[:n]
            self._pieces[token] = piece
        return piece

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return str(self._llm._model.token_get_text(token))

    # --- generation ---------------------------------------------------------------------

    async def generate(self, request: GenerationRequest, sink: TokenSink) -> GenerationResult:
        check_request(request)
        seed = request.seed if request.seed is not None else new_seed()
        async with self._lock:
            self._require()
            return await pump(request, sink, lambda channel: self._run(request, channel, seed))

    def _run(self, request: GenerationRequest, channel: TokenChannel, seed: int) -> LoopOutcome:
        with self._native:
            try:
                return self._token_loop(request, channel, seed)
            except EngineError:
                raise
            except Exception as exc:
                raise EngineError(
                    "engine_error", f"llama.cpp failed during generation ({exc})."
                ) from exc

    def _token_loop(
        self, request: GenerationRequest, channel: TokenChannel, seed: int
    ) -> LoopOutcome:
        llm = self._require()
        prompt = self.tokenize_prompt(self.render_prompt(request.messages, request.tools))
        n_ctx = self.context_length
        if len(prompt) >= n_ctx:
            raise EngineError(
                "context_length_exceeded",
                f"The conversation is {len(prompt)} tokens long but this model's context "
                f"holds {n_ctx}; shorten the input or start a new conversation.",
            )

        def done(reason: Any) -> LoopOutcome:
            return LoopOutcome(reason, input_tokens=len(prompt), seed_used=seed)

        limit = request.max_output_tokens
        position = len(request.resume_tokens)
        if limit is not None and position >= limit:
            return done("length")
        self.sampled_tokens = 0
        self._reset()
        llm.eval(prompt)
        text = Utf8Stream()
        for token in request.resume_tokens:
            # Replayed exactly as first evaluated: one token per decode.
            if channel.should_stop():
                return done("cancelled")
            if llm.n_tokens >= n_ctx:
                return done("context")
            llm.eval([token])
            text.prime(self.token_bytes(token))
        # The output grammar (structured output, tool calls), its state rebuilt by replay.
        grammar = open_constraint(
            self._vocab, self._n_vocab, request.grammar, request.resume_tokens
        )
        while True:
            if channel.should_stop():
                return done("cancelled")
            sample = functools.partial(
                sample_token,
                temperature=request.temperature,
                top_p=request.top_p,
                seed=seed,
                position=position,
            )
            token = pick(grammar, self._last_logits(), sample)
            self.sampled_tokens += 1
            if self._lc.llama_vocab_is_eog(self._vocab, token):
                return done("stop")
            advance(grammar, token)
            channel.emit(TokenPiece(token, text.feed(self.token_bytes(token))))
            position += 1
            if limit is not None and position >= limit:
                return done("length")
            if llm.n_tokens >= n_ctx:
                return done("context")
            if channel.should_stop():
                return done("cancelled")
            llm.eval([token])

    def _reset(self) -> None:
        """Start from an empty KV cache, so every run (first or resumed) sees the same
        cache layout and therefore the same numerics."""
        llm = self._require()
        llm.reset()
        memory = self._lc.llama_get_memory(llm.ctx)
        if memory is not None:
            self._lc.llama_memory_clear(memory, True)

    def _last_logits(self) -> npt.NDArray[np.float32]:
        pointer = self._lc.llama_get_logits_ith(self._require().ctx, -1)
        logits: npt.NDArray[np.float32] = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
        return logits.copy()

    def _require(self) -> Any:
        if self._llm is None:
            raise EngineError("model_unloaded", "The model was unloaded; submit the request again.")
        return self._llm

    async def unload(self) -> None:
        """Free the model once any running generation has ended."""
        async with self._lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                await asyncio.to_thread(self._close, llm)

    def _close(self, llm: Any) -> None:
        with self._native:
            llm.close()
