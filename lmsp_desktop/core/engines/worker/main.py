"""The engine worker's side: runs the llama engine (unchanged) in its own process for one
model, taking orders from the service over the socket it was given and sending tokens back
in the engine's own hand-over groups.

Started by core/engines/worker/client.py as `python -m lmsp_desktop.core.engines.worker FD`
(or, in the packaged app, `lmsp-desktop engine-worker FD`). Imports no Qt and nothing of
the service, so it starts fast. When the service goes away (its end of the socket closes)
the worker exits at once: nothing it holds is worth keeping without the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import signal
import socket
import sys
import threading
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from lmsp_desktop.core.engines.base import (
    EmbeddingRequest,
    EndingSink,
    EngineError,
    GenerationRequest,
    GenerationResult,
    PromptProgress,
    TokenPiece,
)
from lmsp_desktop.core.engines.worker.protocol import encode, receive

log = logging.getLogger("lmsp_desktop.engine_worker")


class Worker:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.model: Any = None
        self.requests: dict[int, GenerationRequest | EmbeddingRequest] = {}
        self.running: set[asyncio.Task[None]] = set()
        self.unloading = False

    def track(self, task: asyncio.Task[None]) -> None:
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    def send(self, *message: Any) -> None:
        # Writes are buffered by the transport: the order of messages is the order of calls.
        self.writer.write(encode(message))

    async def serve(self) -> None:
        while True:
            message = await receive(self.reader)
            if message is None:
                os._exit(0)  # the service is gone: never decode for nobody
            kind = message[0]
            if kind == "load":
                # Loading goes on beside this loop, which keeps reading: a service that dies
                # mid-load ends the worker at once instead of after the load.
                self.track(asyncio.create_task(self.load(*message[1:])))
            elif kind == "generate":
                self.track(asyncio.create_task(self.generate(message[1], message[2])))
            elif kind == "embed":
                self.track(asyncio.create_task(self.embed(message[1], message[2])))
            elif kind == "stop":
                request = self.requests.get(message[1])
                if request is not None:
                    request.cancel.set()
            elif kind == "unload":
                self.unloading = True
                for request in self.requests.values():
                    request.cancel.set()
                await asyncio.gather(*self.running, return_exceptions=True)
                if self.model is not None:
                    await self.model.unload()
                self.send("unloaded")
                await self.writer.drain()
                return

    async def load(self, path: str, options: dict[str, Any], kwargs: dict[str, Any]) -> None:
        from lmsp_desktop.core.engines.llama import LlamaEngine

        def progress(value: float) -> None:
            self.send("progress", value)

        shared = kwargs.pop("shared_verdict", None)
        if shared is not None:  # WorkerEngine.load: probed once however many load it at once
            from lmsp_desktop.core.engines.worker.verdicts import probe_once

            kwargs["run_probe"] = partial(probe_once, *shared)
        try:
            self.model = await LlamaEngine(**options).load(Path(path), progress, **kwargs)
        except EngineError as exc:
            self.send("load_failed", exc.code, exc.message)
            return
        except MemoryError:
            self.send(
                "load_failed",
                "insufficient_memory",
                f"The engine ran out of memory loading {Path(path).name}; lower its context "
                "or concurrent requests, or free memory, then load it again.",
            )
            return
        self.send("loaded", self.facts())
        if self.model.exact_verdict is None:
            # The service keeps the probe's verdict for later workers and restarts; tell it
            # as soon as it is known, not with the first finished generation (a worker
            # killed mid-generation would never have told it).
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._tell_verdict, args=(loop,), daemon=True).start()

    def _tell_verdict(self, loop: asyncio.AbstractEventLoop) -> None:
        self.model.exact_batching  # noqa: B018 (waits for the probe)
        with contextlib.suppress(RuntimeError):  # the worker has ended meanwhile
            loop.call_soon_threadsafe(self._send_facts)

    def _send_facts(self) -> None:
        if not self.unloading and not self.writer.is_closing():
            self.send("facts", self.facts())

    def facts(self) -> dict[str, Any]:
        model = self.model
        return {
            "context_length": model.context_length,
            "parallel": model.parallel,
            "prefix_stats": asdict(model.prefix_stats),
            "exact": model.exact_verdict,
        }

    async def generate(self, gid: int, fields: dict[str, Any]) -> None:
        request = GenerationRequest(**fields)
        self.requests[gid] = request

        def prompt_read(progress: PromptProgress) -> None:
            # Already throttled by the engine's channel (pump.ReportThrottle).
            self.send(
                "prompt",
                gid,
                progress.total,
                progress.cached,
                progress.processed,
                progress.waiting,
            )

        request.on_prompt = prompt_read

        last: list[tuple[int, str]] = []

        async def sink(pieces: list[TokenPiece]) -> bool:
            self.send("tokens", gid, [(p.token_id, p.text) for p in pieces])
            # The service answers a refusal with "stop", which sets the cancel event.
            return not request.cancel.is_set()

        async def ending(pieces: list[TokenPiece], _result: GenerationResult) -> bool:
            # The last tokens ride in "done": the service takes them with the end at once
            # and commits them with the task's finish (B2).
            last.extend((p.token_id, p.text) for p in pieces)
            return not request.cancel.is_set()

        try:
            result = await self.model.generate(request, EndingSink(sink, ending))
        except EngineError as exc:
            self.send("failed", gid, exc.code, exc.message)
        except Exception as exc:  # a bug: the service fails the task, the worker goes on
            log.exception("generation %d failed", gid)
            self.send("failed", gid, "internal_error", f"Internal error in the engine: {exc!r}")
        else:
            self.send("done", gid, result, self.facts(), last)
        finally:
            del self.requests[gid]

    async def embed(self, gid: int, inputs: list[str | list[int]]) -> None:
        request = EmbeddingRequest(inputs)
        self.requests[gid] = request
        try:
            result = await self.model.embed(request)
        except EngineError as exc:
            self.send("failed", gid, exc.code, exc.message)
        except Exception as exc:  # a bug: the service fails the task, the worker goes on
            log.exception("embedding %d failed", gid)
            self.send("failed", gid, "internal_error", f"Internal error in the engine: {exc!r}")
        else:
            self.send("embedded", gid, result)
        finally:
            del self.requests[gid]


async def run(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    await Worker(reader, writer).serve()


def main(argv: list[str]) -> int:
    """`FD [--limit-memory BYTES]`: serve the service on socket FD."""
    logging.basicConfig(level=logging.WARNING, format="engine worker: %(message)s")
    # Ctrl-C in the terminal of `serve` reaches its whole process group, and `systemctl stop`
    # sends SIGTERM to every process of the unit: the service stops its workers itself
    # (unload, or EOF), so a worker never dies of either before the service has begun to
    # stop (its tasks would be handled as after a crash). SIGKILL still ends one.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.SIG_IGN)
    fd = int(argv[0])
    if "--limit-memory" in argv:  # a cap on the address space (tests, constrained hosts)
        limit = int(argv[argv.index("--limit-memory") + 1])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    asyncio.run(run(fd))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
