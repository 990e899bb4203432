"""The rows a scan writes to the `models` table: a found file's values, its header summary,
which recorded model a new file continues, and which files a pull wrote anew."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from lmsp_desktop.core.models.demo import DEMO_MODEL_ID
from lmsp_desktop.core.models.discovery import FoundFile, stat_file
from lmsp_desktop.core.models.gguf_meta import GGUFError, GGUFMeta, GGUFTruncated, read_gguf_meta
from lmsp_desktop.core.models.info import UNVERIFIED, source_of

# What a row's meta says of where its file was found, not of the file: kept when the file's
# own values (its header) are read again.
WHERE_FOUND = ("source", "published_digest", "folder")


def moved_row(rows: dict[str, Any], file: FoundFile, demo: Path | None, present: set[str]) -> Any:
    """The row of the model `file` is the new file of: the one holding the name the file's
    store gives it (the demo's id for the demo), of the same source, whose own file is gone."""
    name = DEMO_MODEL_ID if file.path == demo else file.name
    if name is None:
        return None
    for path, row in rows.items():
        if row["id"] == name and path not in present:
            return row if source_of(name, row["meta"]) == file.source else None
    return None


def read_meta(path: Path) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(architecture, parameters, quantization, context_length) and the meta JSON dict."""
    try:
        header: GGUFMeta = read_gguf_meta(path)
    except GGUFTruncated as exc:  # its header is fine: say what is wrong instead
        return (None, None, None, None), {"error": str(exc)}
    except (GGUFError, OSError) as exc:
        return (None, None, None, None), {"error": f"cannot read the GGUF header: {exc}"}
    meta: dict[str, Any] = {"gguf_version": header.version, "tensor_count": header.tensor_count}
    if header.name:
        meta["name"] = header.name
    if header.chat_template:
        meta["chat_template"] = header.chat_template
    for key in ("general.basename", "general.size_label", "general.license"):
        if isinstance(header.values.get(key), str):
            meta[key.removeprefix("general.")] = header.values[key]
    columns = (header.architecture, header.parameters, header.quantization, header.context_length)
    return columns, meta


def insert_values(
    model_id: str, file: FoundFile, meta: tuple[tuple[Any, ...], dict[str, Any]]
) -> tuple[Any, ...]:
    columns, extra = meta
    extra["source"] = file.source
    if file.published_digest:
        extra["published_digest"] = file.published_digest
    if file.folder is not None:
        extra["folder"] = str(file.folder)
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
        file = FoundFile(
            Path(row["path"]),
            st.st_size,
            st.st_mtime_ns,
            source=source_of(row["id"], meta),
            published_digest=published if isinstance(published, str) else None,
            folder=Path(folder) if isinstance(folder, str) else None,
        )
        found.append((row, file))
    return found
