"""The cut demo model (tests/support/cut_model.py) split in parts as llama.cpp's `gguf-split`
does (tests/support/gguf_split.py), built once per machine and copied where a test wants it.

Writing the parts with the `gguf` package costs ~2.3 CPU-s; copying them, a few hundredths.
Like the cut model, the parts are built under a lock into the temp dir, keyed on the cut
file (itself keyed on the demo file), and renamed into place, so parallel workers share one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from filelock import FileLock

from tests.support.cut_model import cut_demo_model
from tests.support.gguf_split import split_gguf

PARTS = 3


def copy_split_cut_model(dst: Path) -> list[Path]:
    """The cut demo model split in PARTS files named after `dst`, as split_gguf(cut, dst)
    writes them (`dst.stem-0000i-of-0000n.gguf`); returns their paths."""
    cached = _split_cut_model(dst.name)
    copies = []
    for part in cached:
        copy = dst.parent / part.name
        shutil.copyfile(part, copy)
        copies.append(copy)
    return copies


def _split_cut_model(name: str) -> list[Path]:
    cut = cut_demo_model()
    folder = cut.parent / f"split-{PARTS}" / Path(name).stem
    done = folder / "done"  # written last: the parts before it are whole
    if not done.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder) + ".lock"):
            if not done.exists():
                partial = folder.parent / f"{folder.name}.{os.getpid()}.partial"
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir()
                split_gguf(cut, partial / name, PARTS)
                (partial / "done").write_text("")
                os.replace(partial, folder)
    return sorted(p for p in folder.iterdir() if p.suffix == ".gguf")
