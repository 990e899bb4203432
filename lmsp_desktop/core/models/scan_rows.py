"""The rows a scan writes to the `models` table: a found file's values, its header summary,
which recorded model a new file continues, and which files a pull wrote anew."""

from __future__ import annotations

import errno
import json
import os
import re
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmsp_desktop.core.models.demo import DEMO_MODEL_ID
from lmsp_desktop.core.models.discovery import FoundFile, part_paths, stat_file
from lmsp_desktop.core.models.gguf_meta import GGUFError, GGUFMeta, GGUFTruncated, read_gguf_meta
from lmsp_desktop.core.models.info import PARTS, PARTS_SIZE, UNVERIFIED, source_of

# What a row's meta says of where its file was found, not of the file: kept when the file's
# own values (its header) are read again.
# `aliases`: the other names its store gives the file (an Ollama blob tagged twice).
WHERE_FOUND = ("source", "published_digest", "folder", "aliases")
# The first part of a split model (the one listed: discovery.is_model_filename).
SPLIT_FIRST = re.compile(r"-00001-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass
class Matched:
    """Which recorded row each file a scan found continues, and the rows no file continues."""

    # Each found file with its row (None: a new model); a row whose path is not the file's
    # is a name its store moved to a new file (a new Ollama blob, a new revision's snapshot).
    pairs: list[tuple[FoundFile, Any]]
    # Rows whose file is not found (missing, or hidden with their store or folder).
    gone: list[Any]
    # Rows whose name or file another row holds now: a name a store gives as another file's
    # alias, a `-2` twin of a name left by an earlier version. Deleted, or they would shadow
    # the name or hold the path (UNIQUE) the other row takes.
    dropped: list[Any]


def names_of(file: FoundFile, demo: Path | None) -> list[str]:
    """The names a found file goes by in its store, the one it is listed by first."""
    if file.path == demo:
        return [DEMO_MODEL_ID]
    return [n for n in (file.name, *file.aliases) if n]


def match_rows(rows: list[Any], found: list[FoundFile], demo: Path | None) -> Matched:
    """Pairs each found file with the row it continues. A file a store names is the row of that
    name first (of the same source): the store says which file a name is now, as `ollama pull`
    and `hf download` users expect, so a name moved to a new file takes its row along (unless
    the row's own file still goes by that name: two files a store names alike). Then by
    path: the file's own row, unless that row's name is another file's now. The rest are new."""
    by_id = {r["id"]: r for r in rows}
    by_path = {r["path"]: r for r in rows}
    carried = {str(f.path): set(names_of(f, demo)) for f in found}
    by_source: dict[str, set[str]] = {}
    for file in found:
        by_source.setdefault(file.source, set()).update(names_of(file, demo))
    matched: dict[int, Any] = {}
    used: set[str] = set()
    for i, file in enumerate(found):
        for name in names_of(file, demo):
            row = by_id.get(name)
            if row is None or name in used or source_of(name, row["meta"]) != file.source:
                continue
            there = carried.get(row["path"])
            if row["path"] == str(file.path) or there is None or name not in there:
                matched[i] = row
                used.add(name)
                break
    for i, file in enumerate(found):
        row = None if i in matched else by_path.get(str(file.path))
        if row is None or row["id"] in used:
            continue
        names = by_source.get(source_of(row["id"], row["meta"]), set())
        if row["id"] in names and row["id"] not in carried[str(file.path)]:
            continue  # its name leads to another file now: this file is a new model
        matched[i] = row
        used.add(row["id"])
    gone: list[Any] = []
    dropped: list[Any] = []
    for row in rows:
        if row["id"] in used:
            continue
        names = by_source.get(source_of(row["id"], row["meta"]), set())
        (dropped if row["path"] in carried or row["id"] in names else gone).append(row)
    return Matched([(f, matched.get(i)) for i, f in enumerate(found)], gone, dropped)


def split_parts(path: Path) -> list[Path]:
    """Every part of the split model whose first part is `path` (`…-00001-of-00003.gguf`),
    beside it as llama.cpp loads them; `[path]` for a file that is not split."""
    return part_paths(path) if SPLIT_FIRST.search(path.name) else [path]


def read_meta(path: Path) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(architecture, parameters, quantization, context_length) and the meta JSON dict.
    A split model's every part is read: its meta has the bytes of all its parts (PARTS_SIZE:
    its size in every view) and each other part's size and mtime (PARTS: what a scan and a
    run compare with the disk); its parameters count every part's tensors; a part cut short
    or unreadable is its error, named (a cut part 2 was listed verified, and llama.cpp's
    refusal named part 1).
    FileNotFoundError when the file, or one of its parts, is gone: a file deleted since it
    was listed or hashed is missing, not "not a model" (its reason read "cannot read the GGUF
    header: [Errno 2] No such file or directory"), and each caller records it so."""
    columns, meta, header = _read_header(path)
    parts = split_parts(path)
    if len(parts) == 1:
        return columns, meta
    total = 0
    counted = 0  # the tensors' elements of parts 2..n
    recorded: list[dict[str, Any]] = []
    for number, part in enumerate(parts, start=1):
        st = stat_file(part)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, "a part of the split model is gone", str(part))
        total += st.st_size
        if number == 1:
            continue
        recorded.append({"name": part.name, "size_bytes": st.st_size, "mtime_ns": st.st_mtime_ns})
        if meta.get("error"):
            continue  # the first part's error, or an earlier part's, is the model's
        try:
            counted += read_gguf_meta(part).tensor_elements
        except FileNotFoundError:
            raise
        except GGUFTruncated as exc:
            meta["error"] = f"its part {number} of {len(parts)}, {part.name}: {exc}"
        except (GGUFError, OSError) as exc:
            meta["error"] = (
                f"cannot read the GGUF header of its part {number} of {len(parts)}, "
                f"{part.name}: {exc}"
            )
    meta[PARTS_SIZE] = total
    meta[PARTS] = recorded
    declared = header.values.get("general.parameter_count") if header else None
    if header is not None and not (isinstance(declared, int) and declared > 0):
        # The first part's count was its own tensors'; the others hold the rest.
        columns = (columns[0], header.tensor_elements + counted, *columns[2:])
    return columns, meta


def parts_now(path: Path) -> tuple[tuple[int, int], ...] | None:
    """A split model's other parts (2..n) as the disk has them now, (size, mtime_ns) each, as
    FoundFile.parts has them; None if one of them is gone; () for a file that is not split.
    Blocking: it stats them."""
    found = []
    for part in split_parts(path)[1:]:
        st = stat_file(part)
        if st is None:
            return None
        found.append((st.st_size, st.st_mtime_ns))
    return tuple(found)


def same_parts(meta: dict[str, Any], found: tuple[tuple[int, int], ...]) -> bool:
    """Whether a split model's other parts found (parts_now, FoundFile.parts) are the ones
    its meta records (PARTS), by size and mtime. A row recorded before parts were kept (no
    PARTS) is taken as the same: there is nothing to compare."""
    recorded = meta.get(PARTS)
    if not isinstance(recorded, list):
        return True
    kept = [(p.get("size_bytes"), p.get("mtime_ns")) for p in recorded if isinstance(p, dict)]
    return kept == list(found)


def read_gone_or_meta(path: Path) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """read_meta, or None when the file is gone."""
    try:
        return read_meta(path)
    except FileNotFoundError:
        return None


def _read_header(path: Path) -> tuple[tuple[Any, ...], dict[str, Any], GGUFMeta | None]:
    try:
        header: GGUFMeta = read_gguf_meta(path)
    except GGUFTruncated as exc:  # its header is fine: say what is wrong instead
        return (None, None, None, None), {"error": str(exc)}, None
    except FileNotFoundError:
        raise  # gone, not unreadable (read_meta)
    except (GGUFError, OSError) as exc:
        return (None, None, None, None), {"error": f"cannot read the GGUF header: {exc}"}, None
    meta: dict[str, Any] = {"gguf_version": header.version, "tensor_count": header.tensor_count}
    if header.name:
        meta["name"] = header.name
    if header.chat_template:
        meta["chat_template"] = header.chat_template
    for key in ("general.basename", "general.size_label", "general.license"):
        if isinstance(header.values.get(key), str):
            meta[key.removeprefix("general.")] = header.values[key]
    columns = (header.architecture, header.parameters, header.quantization, header.context_length)
    return columns, meta, header


def aliases_of(model_id: str, file: FoundFile) -> list[str]:
    """The names the model's store gives its file besides its id, which it is also found by."""
    return [n for n in (file.name, *file.aliases) if n and n != model_id]


def insert_values(
    model_id: str, file: FoundFile, meta: tuple[tuple[Any, ...], dict[str, Any]]
) -> tuple[Any, ...]:
    columns, extra = meta
    extra["source"] = file.source
    if file.published_digest:
        extra["published_digest"] = file.published_digest
    if file.folder is not None:
        extra["folder"] = str(file.folder)
    aliases = aliases_of(model_id, file)
    if aliases:
        extra["aliases"] = aliases
    return (
        model_id,
        str(file.path),
        file.size_bytes,
        file.mtime_ns,
        UNVERIFIED,
        *columns,
        json.dumps(extra),
        int(time.time()),
    )


def replaced_files(rows: list[Any], paths: Collection[Path]) -> list[tuple[Any, FoundFile]]:
    """The rows whose file is one of `paths` (by path or by the file a link leads to) and is
    no longer the file recorded (another size or mtime), each with that file as a scan would
    find it. Blocking: it stats the files."""
    wanted = {str(p) for p in paths} | {os.path.realpath(p) for p in paths}
    found = []
    for row in rows:
        if row["path"] not in wanted and os.path.realpath(row["path"]) not in wanted:
            continue
        st = stat_file(Path(row["path"]))
        if st is None or (st.st_size, st.st_mtime_ns) == (row["size_bytes"], row["mtime_ns"]):
            continue
        meta = json.loads(row["meta"]) if row["meta"] else {}
        published = meta.get("published_digest")
        folder = meta.get("folder")
        aliases = meta.get("aliases")
        file = FoundFile(
            Path(row["path"]),
            st.st_size,
            st.st_mtime_ns,
            source=source_of(row["id"], meta),
            published_digest=published if isinstance(published, str) else None,
            folder=Path(folder) if isinstance(folder, str) else None,
            aliases=tuple(a for a in aliases if isinstance(a, str))
            if isinstance(aliases, list)
            else (),
        )
        found.append((row, file))
    return found
