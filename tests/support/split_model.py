"""The cut demo model (tests/support/cut_model.py) split in parts as llama.cpp's `gguf-split`
does (tests/support/gguf_split.py), built once per machine and copied where a test wants it.

Writing the parts with the `gguf` package costs ~2.3 CPU-s; copying them, a few hundredths.
Built once per machine (tests/support/built_once.py) into a folder keyed on the cut file's
(itself keyed on the demo file's content and its recipe), the parts' name and the split's
recipe, so parallel workers share one.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

from tests.support import gguf_split
from tests.support.built_once import built_once
from tests.support.cut_model import cut_demo_model

PARTS = 3


def copy_split_cut_model(dst: Path) -> list[Path]:
    """The cut demo model split in PARTS files named after `dst`, as split_gguf(cut, dst)
    writes them (`dst.stem-0000i-of-0000n.gguf`); returns their paths."""
    cut = cut_demo_model()
    key = f"{cut.parent.name}-split-{PARTS}"
    folder = built_once(key, dst.stem, partial(_split, cut, name=dst.name), gguf_split)
    copies = []
    for part in sorted(p for p in folder.iterdir() if p.suffix == ".gguf"):
        copy = dst.parent / part.name
        shutil.copyfile(part, copy)
        copies.append(copy)
    return copies


def _split(cut: Path, folder: Path, *, name: str) -> None:
    folder.mkdir()
    gguf_split.split_gguf(cut, folder / name, PARTS)
