"""tests/support/built_once.py, which the cut, split and long-context test models are built
through: one build per key however many test processes ask at once, no half file under the
name after a failed build, and a new file when the recipe changes."""

from __future__ import annotations

import multiprocessing
import os
import time
import types
from pathlib import Path

import pytest

from tests.support import built_once as module
from tests.support.built_once import built_once, file_key


@pytest.fixture(autouse=True)
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(module, "ROOT", tmp_path / "models")
    return tmp_path / "models"


def _build_slowly(log: Path, started: multiprocessing.synchronize.Event, target: Path) -> None:
    with log.open("a") as out:
        out.write(f"{os.getpid()}\n")
    started.set()
    time.sleep(1)  # the other process asks meanwhile (it waits for `started`)
    target.write_text("built")


def _ask(log: Path, started: multiprocessing.synchronize.Event, wait: bool, out: Path) -> None:
    if wait:
        started.wait(30)
    path = built_once("k", "model.gguf", lambda target: _build_slowly(log, started, target))
    out.write_text(f"{path}\n{path.read_text()}")


def test_two_processes_asking_at_once_share_one_build(tmp_path: Path) -> None:
    fork = multiprocessing.get_context("fork")  # the children keep the fixture's ROOT
    log = tmp_path / "builds"
    started = fork.Event()
    first = fork.Process(target=_ask, args=(log, started, False, tmp_path / "first"))
    second = fork.Process(target=_ask, args=(log, started, True, tmp_path / "second"))
    first.start()
    second.start()
    first.join(60)
    second.join(60)
    assert (first.exitcode, second.exitcode) == (0, 0)
    assert len(log.read_text().split()) == 1  # one build
    assert (tmp_path / "first").read_text() == (tmp_path / "second").read_text()
    assert (tmp_path / "first").read_text().endswith("\nbuilt")  # whole when handed out


def _build_until_killed(started: multiprocessing.synchronize.Event) -> None:
    def build(target: Path) -> None:
        target.write_text("half")
        started.set()
        time.sleep(60)  # killed here

    built_once("k", "model.gguf", build)


def test_a_build_killed_half_way_leaves_no_half_file_and_the_next_builds(root: Path) -> None:
    fork = multiprocessing.get_context("fork")
    started = fork.Event()
    killed = fork.Process(target=_build_until_killed, args=(started,))
    killed.start()
    assert started.wait(60)
    killed.kill()  # SIGKILL: no clean-up runs, and the lock goes with the process
    killed.join(60)
    assert not [p for p in root.rglob("model.gguf")]
    path = built_once("k", "model.gguf", lambda target: target.write_text("whole"))
    assert path.read_text() == "whole"


def test_a_build_that_fails_leaves_nothing_but_its_lock(root: Path) -> None:
    def fail(target: Path) -> None:
        target.write_text("half")
        raise RuntimeError("the recipe failed")

    with pytest.raises(RuntimeError):
        built_once("k", "model.gguf", fail)
    assert [p.name for p in root.rglob("*") if p.is_file()] == ["model.gguf.lock"]


def test_a_changed_recipe_is_built_again_and_a_folder_can_be_built(tmp_path: Path) -> None:
    source = tmp_path / "recipe.py"
    recipe = types.ModuleType("recipe")
    recipe.__file__ = str(source)
    builds: list[Path] = []

    def build(target: Path) -> None:
        builds.append(target)
        target.mkdir()
        (target / "part").write_text(source.read_text())

    source.write_text("PARTS = 3")
    old = built_once("k", "parts", build, recipe)
    assert built_once("k", "parts", build, recipe) == old
    source.write_text("PARTS = 4")
    new = built_once("k", "parts", build, recipe)
    assert new != old
    assert len(builds) == 2
    assert ((old / "part").read_text(), (new / "part").read_text()) == ("PARTS = 3", "PARTS = 4")


def test_the_same_file_installed_again_has_the_same_key(tmp_path: Path) -> None:
    """Every checkout's `make install` writes the demo anew: its builds are still shared."""
    first, again, other = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    first.write_bytes(b"GGUF weights")
    again.write_bytes(b"GGUF weights")
    other.write_bytes(b"GGUF Weights")
    os.utime(again, ns=(1, 1))
    assert file_key(first) == file_key(again)
    assert file_key(first) != file_key(other)
