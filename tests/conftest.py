"""Shared fixtures: offscreen Qt, the event loop of each test, a fresh data directory, an
open store. Helpers live in tests/support (polling.until, lifecycle.started, ...)."""

from __future__ import annotations

import asyncio
import gc
import os
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

from lmsp_desktop.core.storage.store import Store
from tests.support.qt_loop import is_gui, qasync_loop


def pytest_asyncio_loop_factories(config: Any, item: Any) -> dict[str, Any]:
    """The one place that picks a test's loop: GUI tests run on the qasync loop (sharing
    pytest-qt's QApplication), every other test on a plain asyncio loop, what pytest-asyncio
    uses when no hook answers. Called while collecting, so the `gui` mark must be the
    module's `pytestmark` or the test's own decorator, not one added later."""
    if is_gui(item):
        return {"qasync": qasync_loop}
    return {"asyncio": asyncio.new_event_loop}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the marks
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    # Tests of a module that shares a module-scoped fixture stay on one worker together, the
    # fixture-less ones too: some check what the module's earlier tests left (tokens issued,
    # logs written) and would see only part of it on another worker.
    shared_modules = {m for m in map(shared_fixture_module, items) if m is not None}
    for item in items:
        # A test that uses Qt's application through a fixture is a GUI test even if its module
        # forgot the mark, so that `-m "not gui"` really runs the core alone (qutebrowser does).
        if is_gui(item) and item.get_closest_marker("gui") is None:
            item.add_marker(pytest.mark.gui)
        # `make test` spreads the tests over workers (pytest-xdist, --dist loadgroup). Tests
        # that share a module-scoped fixture (a `serve` process, a loaded model) go to one
        # worker together, so that it is built once; the others go wherever a worker is free.
        if item.module.__name__ in shared_modules:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def shared_fixture_module(item: Any) -> str | None:
    """The module whose module-scoped fixture this test shares with its neighbours, if any.
    Session-scoped fixtures are no reason: each worker builds its own once."""
    scopes = {definitions[-1].scope for definitions in item._fixtureinfo.name2fixturedefs.values()}
    return str(item.module.__name__) if scopes & {"module", "class"} else None


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
def qt_garbage_collected_on_the_gui_thread(request: Any) -> Iterator[None]:
    """Python's cycle collector runs in whichever thread allocates when it triggers: a window
    or dialog a GUI test left in a reference cycle (signal lambdas holding `self`) was then
    destroyed in a later test's service thread (LiveCore), and Qt warned "Timers cannot be
    stopped from another thread", failing that test. Collect after each GUI test, here."""
    yield
    if "gui" in request.keywords:
        gc.collect()
