"""A Hugging Face cache holding a download still going (a reviewer killed serve mid-pull and
restarted it): the repo's folder has its blob's partial file and refs, no snapshot yet. The
scan lists nothing for it and warns of nothing; a repo beside it is listed as ever."""

from __future__ import annotations

import os
from pathlib import Path

from lmsp_desktop.core.models.discovery import SourceProblem
from lmsp_desktop.core.models.source_hf import find_hf_cache

GGUF = b"GGUF" + b"\x00" * 60


def test_a_repo_still_downloading_is_not_reported_unreadable(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    going = cache / "models--org--Tiny-GGUF"
    (going / "blobs").mkdir(parents=True)
    (going / "blobs" / ("ab" * 32 + ".incomplete")).write_bytes(b"GGUF partial")
    (going / "refs").mkdir()
    (going / "refs" / "main").write_text("c" * 40)
    done = cache / "models--org--Done-GGUF"
    blob = done / "blobs" / ("cd" * 32)
    blob.parent.mkdir(parents=True)
    blob.write_bytes(GGUF)
    snapshot = done / "snapshots" / ("d" * 40)
    snapshot.mkdir(parents=True)
    os.symlink(os.path.relpath(blob, snapshot), snapshot / "done-Q4_K_M.gguf")
    (done / "refs").mkdir()
    (done / "refs" / "main").write_text("d" * 40)

    problems: list[SourceProblem] = []
    found = find_hf_cache(cache, problems)
    assert problems == []  # was: "cannot read the folder …Tiny-GGUF (No such file …)"
    assert [f.path.name for f in found] == ["done-Q4_K_M.gguf"]
