"""Shared fixtures: offscreen Qt, the event loop of each test, a fresh data directory, an
open store. Helpers live in tests/support (polling.until, lifecycle.started, ...)."""

from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The app reads the model stores other apps keep (Ollama, the Hugging Face cache); the tests
# must not list whatever this machine's user has in them. Tests that want a store point these
# (or HOME) at one they build (tests/support/model_stores.py).
# (Paths that do not exist: a store that is not there is simply not read.)
os.environ["OLLAMA_MODELS"] = os.path.join(tempfile.gettempdir(), "lmsp-tests-no-ollama")
os.environ["HF_HUB_CACHE"] = os.path.join(tempfile.gettempdir(), "lmsp-tests-no-hf-cache")
# The service keeps the exactness probe's verdicts in the user's cache directory, so that a
# restarted `serve` does not probe again (docs/engine.md). The suite's services share one
# cache for the run (made by the first process, which the xdist workers and every `serve`
# inherit it from): each model and settings is probed once per run, not once per restart,
# and never answered from the user's cache or an earlier run's.
if "LMSP_CACHE_DIR" not in os.environ:
    os.environ["LMSP_CACHE_DIR"] = tempfile.mkdtemp(prefix="lmsp-tests-cache-")
    atexit.register(shutil.rmtree, os.environ["LMSP_CACHE_DIR"], True)

from lmsp_desktop.core.storage.store import Store
from tests.support.qt_loop import is_gui, qasync_loop

# The shared service fixtures' asserts explain their failures: rewritten as test modules are,
# registered here, before any test module imports them (a registration in a module that runs
# after another module imported them failed that collection).
pytest.register_assert_rewrite("tests.integration.service_fixtures")


def pytest_asyncio_loop_factories(config: Any, item: Any) -> dict[str, Any]:
    """The one place that picks a test's loop: GUI tests run on the qasync loop (sharing
    pytest-qt's QApplication), every other test on a plain asyncio loop, what pytest-asyncio
    uses when no hook answers. Called while collecting, so the `gui` mark must be the
    module's `pytestmark` or the test's own decorator, not one added later."""
    if is_gui(item):
        return {"qasync": qasync_loop}
    return {"asyncio": asyncio.new_event_loop}


# The modules that take longest (summed --durations of the two-worker runs of 2026-12-01),
# longest first. `make test` hands whole modules to its two workers in collection order
# (--dist loadfile --no-loadscope-reorder): these are collected first, so that no worker
# starts a five-minute module when the other is nearly done. A module missing here only
# runs later; an unknown name here is ignored.
LONGEST_FIRST = (
    "test_resume_among_neighbours.py",
    "test_resume_after_kill.py",
    "test_real_clients.py",
    "test_llama_batching.py",
    "test_fuzz_openapi.py",
    "test_crash_loop.py",
    "test_embeddings_crash.py",
    "test_llama_grammar.py",
    "test_llama_engine.py",
    "test_bench_smoke.py",
    "test_cancel_races.py",
    "test_anthropic_clients.py",
    "test_model_sources_serve.py",
    "test_engine_worker_crash.py",
    "test_completions_clients.py",
    "test_memory_fit.py",
    "test_open_responses_schema.py",
    "test_download_serve.py",
    "test_readme_tools.py",
)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    # A test that uses Qt's application through a fixture is a GUI test even if its module
    # forgot the mark, so that `-m "not gui"` really runs the core alone (qutebrowser does).
    for item in items:
        if is_gui(item) and item.get_closest_marker("gui") is None:
            item.add_marker(pytest.mark.gui)
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    # A stable sort: each module's tests keep their order and stay together.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session: Any) -> None:
    """Every test module and its libraries are imported now: move those objects out of the
    cycle collector's view (gc.freeze). A full collection then walks only what the tests
    create, not the ~400,000 objects of Qt, hypothesis, schemathesis and the clients: 0.01 s
    instead of 0.33 s of CPU, and the suite collects after every GUI test (below) and in
    every `open_app`. Frozen objects are kept alive, so collect the garbage first."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
async def store(data_dir: Path) -> AsyncIterator[Store]:
    opened = Store(data_dir)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(autouse=True)
def no_internal_error_left_on_screen(request: Any) -> Iterator[None]:
    """A test that leaves "Something went wrong inside LMSP Desktop" on screen hid a bug (a
    timer querying a stopped core did, and its box then broke a later test): fail it here."""
    yield
    if "lmsp_desktop.gui.aio" in sys.modules:  # a window closed in this test: the next one
        sys.modules["lmsp_desktop.gui.aio"].closing(False)  # reports errors again
    if "PySide6.QtWidgets" not in sys.modules:
        return
    from PySide6.QtWidgets import QApplication, QMessageBox

    if QApplication.instance() is None:
        return
    left = [
        box
        for box in QApplication.topLevelWidgets()
        if isinstance(box, QMessageBox)
        and box.isVisible()
        and box.text().startswith("Something went wrong inside")
    ]
    for box in left:
        box.close()
    if left:
        pytest.fail(f"{request.node.nodeid} left an internal error on screen: {left[0].text()}")


@pytest.fixture(autouse=True)
def garbage_collected_after_each_test() -> Iterator[None]:
    """Each test's garbage is collected in its own teardown (0.01 s, gc.freeze above), so
    what a collection finds is blamed on the test that made it:
    - Python's cycle collector runs in whichever thread allocates when it triggers: a window
      or dialog a GUI test left in a reference cycle (signal lambdas holding `self`) was then
      destroyed in a later test's service thread (LiveCore), and Qt warned "Timers cannot be
      stopped from another thread", failing that test;
    - a socket left open in a cycle warns (ResourceWarning, an error here) when collected: the
      CI of f9223e3 failed an unrelated store test (test_delta_batches) with another test's
      unclosed loopback socket, which a full run with this collection did not show again."""
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def our_log_level_as_found() -> Iterator[None]:
    """A test that runs a command in-process (cli.main → setup_logging) sets the lmsp_desktop
    logger's own level: put back, so a later test's caplog at DEBUG (test_download_endings:
    no token in any line, DEBUG ones included) still sees our DEBUG records."""
    ours = logging.getLogger("lmsp_desktop")
    level = ours.level
    yield
    ours.setLevel(level)
