"""Finding GGUF model files in the model folders (blocking: run in a worker thread)."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

# Parts 2..n of a split model are loaded through part 1; listing them would offer models
# that cannot run on their own.
_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


# Where a model file was found (`source` in /v1/models; upstream models say "upstream").
FOLDER = "folder"
DEMO = "demo"


@dataclass(frozen=True)
class FoundFile:
    path: Path  # absolute; in the model folders symlinks are resolved (see sources for others)
    size_bytes: int
    mtime_ns: int
    source: str = FOLDER
    # The name users know it by in its store (`qwen2.5:7b`); None: made from the file name.
    name: str | None = None
    # The other names its store gives the same file (an Ollama blob tagged twice).
    aliases: tuple[str, ...] = ()
    # The sha256 its store names it by (Ollama and Hugging Face blobs), `sha256:<hex>`.
    published_digest: str | None = None
    # The model folder it was found in (resolved), for a folder's file: kept with its row, as
    # the path cannot tell it (a file linked into the folder is recorded by its real path).
    folder: Path | None = None
    # A split model's other parts (2..n) as found beside it: (size, mtime_ns) each, which a
    # scan compares with the ones recorded as it does the first part's (with_parts).
    parts: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class SourceProblem:
    """Something in a model store that could not be listed, and what to do about it."""

    source: str
    path: str
    message: str


def is_model_filename(name: str) -> bool:
    lower = name.lower()
    if not lower.endswith(".gguf") or lower.startswith("."):
        return False
    if lower.startswith("mmproj"):  # vision projectors, not models
        return False
    split = _SPLIT_PART.search(name)
    return split is None or int(split.group(1)) == 1


def missing_parts(path: Path) -> list[str]:
    """The other parts of a split model (`…-00001-of-00003.gguf`) that are not beside it:
    llama.cpp loads them by name from the first part's folder."""
    return [p.name for p in part_paths(path)[1:] if stat_file(p) is None]


def stat_file(path: Path) -> os.stat_result | None:
    """The file's stat, or None if it is gone or not a regular file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def unreadable(source: str, path: Path | str, exc: OSError) -> SourceProblem:
    reason = exc.strerror or str(exc)
    return SourceProblem(
        source,
        str(path),
        f"cannot read the folder {path} ({reason}); its models are not listed. Give this "
        "user read access to it, or switch this source off in Settings.",
    )


def find_model_files(
    folders: list[Path], extra: list[Path], problems: list[SourceProblem] | None = None
) -> list[FoundFile]:
    """`*.gguf` in each folder and its direct subfolders (the publisher/model layouts other
    apps use), plus `extra` files; sorted by path so ids are assigned deterministically.
    Each file found in a folder names that folder (the first of `folders` that holds it).
    Folders that cannot be read are reported in `problems`."""
    problems = [] if problems is None else problems
    candidates: list[tuple[Path, Path | None]] = [(path, None) for path in extra]
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            problems.append(unreadable(FOLDER, folder, exc))
            continue
        for entry in entries:
            if entry.is_dir():
                try:
                    candidates.extend((Path(e.path), folder) for e in os.scandir(entry.path))
                except OSError as exc:
                    problems.append(unreadable(FOLDER, entry.path, exc))
            else:
                candidates.append((Path(entry.path), folder))
    found: dict[Path, FoundFile] = {}
    for candidate, found_in in candidates:
        if not is_model_filename(candidate.name):
            continue
        st = stat_file(candidate)
        if st is None:
            continue
        resolved = candidate.resolve()
        file = FoundFile(resolved, st.st_size, st.st_mtime_ns, folder=found_in)
        found.setdefault(resolved, file)
    return [found[p] for p in sorted(found)]


def with_parts(file: FoundFile, problems: list[SourceProblem]) -> FoundFile | None:
    """`file` with its other parts' sizes and mtimes (a split model's first part), or None if
    some are not beside it (a problem noted in `problems`: such a model is not listed)."""
    if _SPLIT_PART.search(file.path.name) is None:
        return file
    missing = missing_parts(file.path)
    if missing:
        problems.append(
            SourceProblem(
                file.source,
                str(file.path),
                f"the split model {file.path.name} is not listed: its other parts are not all "
                f"beside its first part (missing: {', '.join(missing)}). Put every part in the "
                "same folder (an unfinished download? get it again).",
            )
        )
        return None
    stats = [stat_file(p) for p in part_paths(file.path)[1:]]
    if any(st is None for st in stats):  # deleted since missing_parts looked
        return None
    return dataclasses.replace(
        file, parts=tuple((st.st_size, st.st_mtime_ns) for st in stats if st is not None)
    )


def part_paths(path: Path) -> list[Path]:
    """Every part of the split model whose part `path` is (`…-00001-of-00003.gguf`), in order,
    beside it as llama.cpp loads them; `[path]` for a file that is not split."""
    split = _SPLIT_PART.search(path.name)
    if split is None:
        return [path]
    count = int(split.group(2))
    stem = path.name[: split.start()]
    return [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
