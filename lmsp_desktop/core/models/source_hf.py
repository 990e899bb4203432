"""The Hugging Face cache, read through `huggingface_hub.scan_cache_dir()`: each model repo's
snapshot `.gguf` files, named `org/repo:quant`. A snapshot file is a symlink to a blob named by
its ETag, which for LFS files (every GGUF) is the sha256 of the content: the published digest.

The snapshot path (not the blob) is what gets loaded: llama.cpp finds a split model's other
parts by the first part's file name.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from lmsp_desktop.core.models.discovery import (
    FoundFile,
    SourceProblem,
    is_model_filename,
    stat_file,
    unreadable,
)
from lmsp_desktop.core.models.gguf_meta import quant_from_filename
from lmsp_desktop.core.models.ids import source_model_id

if TYPE_CHECKING:
    from huggingface_hub import CachedRepoInfo

log = logging.getLogger(__name__)

SOURCE = "huggingface"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def find_hf_cache(cache: Path, problems: list[SourceProblem]) -> list[FoundFile]:
    # No cache (most machines without the Hugging Face tools, and every test run): the
    # scanner's own test (CacheNotFound) without importing huggingface_hub's cache modules,
    # ~0.02 CPU-s of every scan, the one a service starts with included. Whatever the test
    # cannot answer the scanner meets again and reports as before.
    try:
        missing = not cache.expanduser().resolve().exists()
    except (OSError, RuntimeError):
        missing = False
    if missing:
        return []
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache)
    except CacheNotFound:
        return []  # no cache yet: nothing to say
    except (OSError, ValueError) as exc:
        problems.append(
            unreadable(SOURCE, cache, exc if isinstance(exc, OSError) else OSError(str(exc)))
        )
        return []
    found: list[FoundFile] = []
    scanned: set[str] = set()
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        scanned.add(repo.repo_path.name)
        if repo.repo_type == "model":
            found += _repo_files(repo)
    # A repo the scanner gave up on (one broken symlink makes it "corrupted"): list its
    # other files and say which link is broken, so one bad file does not hide its siblings.
    for warning in info.warnings:
        log.info("Hugging Face cache: %s", warning)
    root = info.cache_dir or cache
    try:
        with os.scandir(root) as entries:
            leftovers = sorted(e.name for e in entries if e.name.startswith("models--"))
    except OSError as exc:
        problems.append(unreadable(SOURCE, root, exc))
        return found
    for name in leftovers:
        if name not in scanned:
            found += _walk_damaged_repo(root / name, problems)
    return found


def _repo_files(repo: CachedRepoInfo) -> list[FoundFile]:
    """One model per name and per blob. A name (`org/repo:q4_k_m`) is the file of the revision
    a ref names (`main` first, then the newest other ref), as `hf download` would run it now:
    a new revision keeps the old snapshot in the cache, and its file, named by no ref, is the
    old version, not a second model. A file only an older revision has (another quant fetched
    before the repo moved on) is still listed, from its newest revision."""
    revisions = sorted(
        repo.revisions,
        key=lambda r: ("main" not in r.refs, not r.refs, -r.last_modified, r.commit_hash),
    )
    by_blob: dict[Path, FoundFile] = {}
    named: set[str | None] = set()
    for revision in revisions:
        here: list[FoundFile] = []
        for file in sorted(revision.files, key=lambda f: str(f.file_path)):
            if file.blob_path in by_blob or not is_model_filename(file.file_name):
                continue
            found = _found(repo.repo_id, file.file_path, file.blob_path.name)
            if found is not None and found.name not in named:
                by_blob[file.blob_path] = found
                here.append(found)
        named.update(f.name for f in here)  # two files of one revision may share a name
    return list(by_blob.values())


def _found(repo_id: str, path: Path, blob_name: str) -> FoundFile | None:
    st = stat_file(path)
    if st is None:
        return None
    tag = quant_from_filename(path.name) or path.name[: -len(".gguf")]
    return FoundFile(
        path.absolute(),
        st.st_size,
        st.st_mtime_ns,
        source=SOURCE,
        name=source_model_id(repo_id.split("/"), tag),
        published_digest=f"sha256:{blob_name}" if _SHA256.fullmatch(blob_name) else None,
    )


def _walk_damaged_repo(repo_path: Path, problems: list[SourceProblem]) -> list[FoundFile]:
    repo_id = repo_path.name.removeprefix("models--").replace("--", "/")
    try:
        snapshots = _by_preference(repo_path, sorted((repo_path / "snapshots").iterdir()))
        revisions = [sorted(s.rglob("*.gguf")) for s in snapshots if s.is_dir()]
    except FileNotFoundError:
        # No snapshot yet: a download still going (its blob's partial file is all there
        # is) or one that never finished. Nothing to list, and nothing to warn about.
        return []
    except OSError as exc:
        problems.append(unreadable(SOURCE, repo_path, exc))
        return []
    found: dict[str, FoundFile] = {}
    named: set[str | None] = set()
    for files in revisions:  # as _repo_files: a name from the revision a ref names first
        here: list[FoundFile] = []
        for path in files:
            if not is_model_filename(path.name):
                continue
            target = Path(os.path.realpath(path))
            if not target.exists():
                problems.append(
                    SourceProblem(
                        SOURCE,
                        str(path),
                        f"{path} is a broken link: its blob {target.name} is not in the Hugging "
                        f"Face cache (a deleted or interrupted download); it is not listed. "
                        f"Download it again (lmsp-desktop models pull {repo_id}:{path.name}).",
                    )
                )
                continue
            item = _found(repo_id, path, target.name)
            if item is not None and str(target) not in found and item.name not in named:
                found[str(target)] = item
                here.append(item)
        named.update(f.name for f in here)
    return list(found.values())


def _by_preference(repo_path: Path, snapshots: list[Path]) -> list[Path]:
    """`snapshots` with the one `refs/main` names first, then those other refs name, then the
    rest, newest first within each."""
    refs: dict[str, set[str]] = {}
    try:
        for ref in (repo_path / "refs").rglob("*"):
            if ref.is_file():
                name = ref.relative_to(repo_path / "refs").as_posix()
                refs.setdefault(ref.read_text().strip(), set()).add(name)
    except OSError:
        pass  # no refs (a snapshot fetched by its commit): newest first

    def key(snapshot: Path) -> tuple[bool, bool, float, str]:
        names = refs.get(snapshot.name, set())
        try:
            mtime = snapshot.stat().st_mtime
        except OSError:
            mtime = 0.0
        return ("main" not in names, not names, -mtime, snapshot.name)

    return sorted(snapshots, key=key)
