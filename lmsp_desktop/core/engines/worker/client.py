"""The service's side of engine workers: an Engine whose every load starts a worker process
running the llama engine for that one model (main.py), and the LoadedModel that drives it.

llama.cpp's decoding never runs in the process holding the store, the HTTP service and the
window: when it dies (SIGKILL from the OOM killer, SIGSEGV, SIGABRT) those stay up, every
generation it was running fails with EngineCrashed naming the signal, and the runner
applies each task's restart policy. Tokens arrive in the worker's hand-over groups (it runs
the engine with the request's sink_interval) and reach the runner's sink unchanged, so what
is sent after commit, replay and Last-Event-ID work as in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines.base import (
    CancelEvent,
    ContextShape,
    EmbeddingRequest,
    EmbeddingResult,
    EngineCrashed,
    EngineError,
    GenerationRequest,
    GenerationResult,
    LoadSettings,
    ProgressSink,
    PromptProgress,
    TokenPiece,
    TokenSink,
)
from lmsp_desktop.core.engines.prefix_cache import PrefixStats
from lmsp_desktop.core.engines.pump import LoopOutcome, TokenChannel, check_request, pump_started
from lmsp_desktop.core.engines.worker.protocol import encode, receive, signal_name
from lmsp_desktop.core.engines.worker.verdicts import VerdictCache, verdict_key

log = logging.getLogger(__name__)
# How long an unload waits for the worker to free the model and exit before killing it
# (the llama engine itself gives its threads 60 s).
UNLOAD_WAIT_S = 75.0


def _on_loop(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """Run `callback` on `loop` from any thread; nothing once the loop has closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback)


def worker_command(fd: int, memory_limit: int | None = None) -> list[str]:
    """How to start a worker: the packaged app has no `python -m`, it runs its own
    executable's hidden `engine-worker` subcommand (cli.py)."""
    if getattr(sys, "frozen", False):
        command = [sys.executable, "engine-worker", str(fd)]
    else:
        command = [sys.executable, "-m", "lmsp_desktop.core.engines.worker", str(fd)]
    if memory_limit is not None:
        command += ["--limit-memory", str(memory_limit)]
    return command


def _end(process: subprocess.Popen[Any]) -> None:
    """Kill a worker nobody will talk to and reap it (quick once it is killed)."""
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    process.wait()


def _end_unwanted(theirs: socket.socket, spawning: asyncio.Future[Any]) -> None:
    """A worker started for a load that was cut short while Popen ran: ended."""
    theirs.close()
    if not spawning.cancelled() and spawning.exception() is None:
        _end(spawning.result())


class WorkerEngine:
    """Loads each model in a worker process running `LlamaEngine(**options)`. Load keyword
    arguments (context length, settings objects) are forwarded as they are: they must
    pickle. `memory_limit` caps each worker's address space (bytes; None: no cap)."""

    def __init__(
        self, *, memory_limit: int | None = None, verdict_file: Path | None = None, **options: Any
    ) -> None:
        self.options = options
        self.memory_limit = memory_limit
        # Exactness verdicts of earlier workers (verdicts.py), kept in `verdict_file` across
        # restarts when given: a fresh worker for the same file and settings skips the
        # load-time probe (seconds before a resumed task's first token after a crash or a
        # restart, B17; and after every idle unload).
        self.verdicts = VerdictCache(verdict_file)

    @property
    def parallel(self) -> int | None:
        value = self.options.get("parallel")
        return int(value) if value is not None else None

    @parallel.setter
    def parallel(self, value: int) -> None:
        self.options["parallel"] = value  # the next load takes it

    def context_shapes(self, settings: LoadSettings) -> list[ContextShape]:
        """The contexts a worker's load opens (the llama engine's rule; arithmetic only)."""
        from lmsp_desktop.core.engines.llama_layout import LlamaLayout

        return LlamaLayout(**self.options).context_shapes(settings)

    async def load(
        self, path: Path, progress: ProgressSink | None = None, **kwargs: Any
    ) -> WorkerModel:
        key = verdict_key(Path(path), kwargs.get("settings"), self.options)
        exact = self.verdicts.get(key) if key is not None else None
        if exact is not None:
            kwargs = {**kwargs, "exact": exact}
        elif key is not None and self.verdicts.path is not None:
            # The worker probes under the cache's lock and keeps the verdict itself: another
            # process probing this file and settings at the same time is waited for.
            kwargs = {**kwargs, "shared_verdict": (self.verdicts.path, key)}
        model = await WorkerModel.start(Path(path), self.memory_limit)
        if key is not None:
            model.on_verdict = partial(self.verdicts.put, key)
        try:
            await model.load(self.options, kwargs, progress)
        except BaseException:
            await model.kill()  # a failed or cut-short load: its memory goes with it
            raise
        return model


class WorkerModel:
    """A model loaded in a worker process; same contract as the llama engine's LlamaModel."""

    def __init__(
        self, process: subprocess.Popen[Any], reader: Any, writer: Any, path: Path
    ) -> None:
        self._process = process
        self.pid = process.pid
        self.path = path
        self._writer: asyncio.StreamWriter = writer
        self.context_length = 0
        self.parallel = 1
        self._prefix = PrefixStats()
        self._next_id = 0
        self._pending: dict[int, tuple[TokenChannel, asyncio.Future[LoopOutcome]]] = {}
        self._embeddings: dict[int, asyncio.Future[EmbeddingResult]] = {}
        loop = asyncio.get_running_loop()
        self._loaded: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._progress: ProgressSink | None = None
        self._closing = False
        self.crash: EngineCrashed | None = None  # set when the process died unasked
        # Told the worker's exactness verdict once its probe has run (WorkerEngine.verdicts).
        self.on_verdict: Callable[[bool], None] | None = None
        self.exact_verdict: bool | None = None  # as of the worker's last facts
        self._on_crash: Callable[[EngineCrashed], None] | None = None  # when_crashed
        self._reading = asyncio.create_task(self._read(reader), name=f"engine-worker:{self.pid}")

    @classmethod
    async def start(cls, path: Path, memory_limit: int | None) -> WorkerModel:
        ours, theirs = socket.socketpair()
        # Popen runs in a thread (a fork of a large process is not instant). A load cut short
        # while it runs (the service stopping during a load) must not leave the process
        # behind: the thread goes on, so its process is killed and reaped when it is there.
        spawning = asyncio.ensure_future(
            asyncio.to_thread(
                partial(
                    subprocess.Popen,
                    worker_command(theirs.fileno(), memory_limit),
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            )
        )
        try:
            process = await asyncio.shield(spawning)
        except OSError as exc:
            ours.close()
            theirs.close()
            raise EngineError(
                "engine_start_failed",
                f"Could not start an engine process ({exc}); check that the installation is "
                "complete.",
            ) from exc
        except asyncio.CancelledError:
            ours.close()
            # theirs stays open until Popen has passed it on
            spawning.add_done_callback(partial(_end_unwanted, theirs))
            raise
        theirs.close()  # the worker's end lives in the worker alone: its death is EOF here
        try:
            reader, writer = await asyncio.open_unix_connection(sock=ours)
        except BaseException:
            ours.close()
            _end(process)
            raise
        return cls(process, reader, writer, path)

    # --- the conversation with the worker ------------------------------------------------

    def _send(self, *message: Any) -> None:
        if self.crash is None and not self._writer.is_closing():
            self._writer.write(encode(message))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while (message := await receive(reader)) is not None:
                self._dispatch(message)
        finally:
            returncode = await asyncio.to_thread(self._process.wait)
            self._writer.close()
            if not self._closing:
                self._died(returncode)

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "tokens":
            entry = self._pending.get(message[1])
            if entry is not None:
                entry[0].deliver([TokenPiece(t, text) for t, text in message[2]])
        elif kind == "prompt":
            entry = self._pending.get(message[1])
            if entry is not None:
                entry[0].deliver_prompt(PromptProgress(*message[2:]))
        elif kind == "done":
            _gid, result, facts, last = message[1:]
            self._facts(facts)
            entry = self._pending.get(message[1])
            if entry is not None:  # the last tokens, taken with the end (pump, EndingSink)
                entry[0].deliver([TokenPiece(t, text) for t, text in last])
            self._end(
                message[1],
                LoopOutcome(
                    result.finish_reason,
                    result.input_tokens,
                    result.seed_used,
                    result.cached_tokens,
                ),
            )
        elif kind == "embedded":
            self._embedded(message[1], message[2])
        elif kind == "failed":
            self._end(message[1], EngineError(message[2], message[3]))
        elif kind == "progress":
            if self._progress is not None:
                self._progress(message[1])
        elif kind == "facts":  # the exactness probe has answered
            self._facts(message[1])
        elif kind == "loaded":
            self._facts(message[1])
            if not self._loaded.done():
                self._loaded.set_result(message[1])
        elif kind == "load_failed" and not self._loaded.done():
            self._loaded.set_exception(EngineError(message[1], message[2]))

    def _facts(self, facts: dict[str, Any]) -> None:
        self.context_length = facts["context_length"]
        self.parallel = facts["parallel"]
        self._prefix = PrefixStats(**facts["prefix_stats"])
        self.exact_verdict = facts.get("exact")
        if self.exact_verdict is not None and self.on_verdict is not None:
            self.on_verdict(bool(self.exact_verdict))

    def _embedded(self, gid: int, outcome: EmbeddingResult | BaseException) -> None:
        done = self._embeddings.pop(gid, None)
        if done is None or done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    def _end(self, gid: int, outcome: LoopOutcome | BaseException) -> None:
        if gid in self._embeddings:  # only failures end an embedding through here
            if isinstance(outcome, BaseException):
                self._embedded(gid, outcome)
            return
        entry = self._pending.pop(gid, None)
        if entry is None:
            return
        channel, done = entry
        channel.close()
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    def _died(self, returncode: int | None) -> None:
        cause = signal_name(returncode)
        log.error(
            "the engine process of %s (pid %d) ended with %s", self.path.name, self.pid, cause
        )
        self.crash = EngineCrashed(self.path.name, cause)
        if not self._loaded.done():
            self._loaded.set_exception(self.crash)
            self._loaded.exception()  # retrieved: load() may not be waiting any more
        for gid in [*self._pending, *self._embeddings]:
            self._end(gid, self.crash)
        if self._on_crash is not None:
            self._on_crash(self.crash)

    def when_crashed(self, callback: Callable[[EngineCrashed], None]) -> None:
        """Call `callback` with the crash once the process dies unasked (at once if it
        already has): the runner drops a model whose process died with no task on it, which
        no generation would report until the next request failed on it."""
        self._on_crash = callback
        if self.crash is not None:
            callback(self.crash)

    # --- the LoadedModel contract --------------------------------------------------------

    async def load(
        self, options: dict[str, Any], kwargs: dict[str, Any], progress: ProgressSink | None
    ) -> None:
        self._progress = progress
        if progress is not None:
            progress(0.0)
        self._send("load", str(self.path), options, kwargs)
        try:
            await self._loaded
        finally:
            self._progress = None
        if progress is not None:
            progress(1.0)

    @property
    def prefix_stats(self) -> PrefixStats:
        """The worker's prefix cache figures as of its last finished generation."""
        return self._prefix

    async def generate(self, request: GenerationRequest, sink: TokenSink) -> GenerationResult:
        check_request(request)
        if self.crash is not None:
            raise self.crash
        if self._closing:
            raise EngineError("model_unloaded", "The model was unloaded; submit the request again.")
        loop = asyncio.get_running_loop()
        self._next_id += 1
        gid = self._next_id
        fields = {
            f.name: getattr(request, f.name)
            for f in dataclasses.fields(request)
            if f.name not in ("cancel", "on_prompt")  # this process's own: not sent
        }

        def stop() -> None:
            if gid in self._pending:
                self._send("stop", gid)

        def start(channel: TokenChannel) -> asyncio.Future[LoopOutcome]:
            done: asyncio.Future[LoopOutcome] = loop.create_future()
            self._pending[gid] = (channel, done)
            channel.on_refuse = stop
            self._send("generate", gid, fields)
            if isinstance(request.cancel, CancelEvent):
                request.cancel.when_set(partial(_on_loop, loop, stop))
            return done

        # The worker already groups tokens by the request's sink_interval; here they go on
        # to the sink as they come (merged only while the sink is still busy committing).
        here = dataclasses.replace(request, sink_interval=0.0)
        try:
            return await pump_started(here, sink, start)
        finally:
            self._pending.pop(gid, None)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        """The worker's model embeds the inputs; a cancel is passed on as "stop"."""
        if self.crash is not None:
            raise self.crash
        if self._closing:
            raise EngineError("model_unloaded", "The model was unloaded; submit the request again.")
        loop = asyncio.get_running_loop()
        self._next_id += 1
        gid = self._next_id
        done: asyncio.Future[EmbeddingResult] = loop.create_future()
        self._embeddings[gid] = done
        self._send("embed", gid, request.inputs)

        def stop() -> None:
            if gid in self._embeddings:
                self._send("stop", gid)

        if isinstance(request.cancel, CancelEvent):
            request.cancel.when_set(partial(_on_loop, loop, stop))
        try:
            return await done
        finally:
            self._embeddings.pop(gid, None)

    async def unload(self) -> None:
        """Ask the worker to free the model and exit; kill it if it does not in time."""
        if self._closing:
            await asyncio.shield(self._reading)
            return
        self._closing = True
        self._send("unload")
        try:
            await asyncio.wait_for(asyncio.shield(self._reading), UNLOAD_WAIT_S)
        except TimeoutError:
            log.error("the engine process of %s did not exit; killing it", self.path.name)
            await self.kill()

    async def kill(self) -> None:
        """End the worker at once (a cut-short load, a hung unload): the OS frees it all."""
        self._closing = True
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()
        await asyncio.shield(self._reading)
