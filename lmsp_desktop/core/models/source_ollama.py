"""Ollama's store: `manifests/<registry>/<namespace>/<name>/<tag>` (JSON) name the GGUF blob
`blobs/sha256-<hex>` of their model layer. Newer releases also keep each manifest as a blob and
default the registry to `ollama.com`; the manifest files themselves stay where they were.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from lmsp_desktop.core.models.digests import is_digest
from lmsp_desktop.core.models.discovery import FoundFile, SourceProblem, stat_file, unreadable
from lmsp_desktop.core.models.ids import source_model_id

SOURCE = "ollama"
MODEL_LAYER = "application/vnd.ollama.image.model"
# The registries whose `library` models Ollama names without registry or namespace.
DEFAULT_REGISTRIES = ("registry.ollama.ai", "ollama.com")
MAX_MANIFEST_BYTES = 1024 * 1024


def find_ollama(root: Path, problems: list[SourceProblem]) -> list[FoundFile]:
    """One model per blob, named as `ollama list` names it (`qwen2.5:7b`,
    `namespace/name:tag`, `hf.co/org/repo:tag`). A blob tagged twice (`ollama pull smollm2`
    then `ollama pull smollm2:135m`) is one model going by both names, as in Ollama: named by
    its first tag other than `latest` (in sorted order), the others its aliases."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return []  # no Ollama here
    by_blob: dict[Path, list[FoundFile]] = {}
    for manifest, parts in _manifest_files(manifests, problems):
        found = _read_manifest(root, manifest, parts, problems)
        if found is not None and found.name:
            by_blob.setdefault(found.path, []).append(found)
    models = []
    for tags in by_blob.values():
        names = sorted({str(f.name) for f in tags}, key=lambda n: (n.endswith(":latest"), n))
        first = next(f for f in tags if f.name == names[0])
        models.append(dataclasses.replace(first, aliases=tuple(names[1:])))
    return models


def _manifest_files(manifests: Path, problems: list[SourceProblem]) -> list[tuple[Path, list[str]]]:
    """Every `<registry>/<namespace>/<name>/<tag>` file under `manifests`, sorted."""
    level: list[tuple[Path, list[str]]] = [(manifests, [])]
    for _ in range(4):
        deeper: list[tuple[Path, list[str]]] = []
        for folder, parts in level:
            try:
                with os.scandir(folder) as listing:
                    entries = sorted(listing, key=lambda e: e.name)
            except OSError as exc:
                problems.append(unreadable(SOURCE, folder, exc))
                continue
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                deeper.append((Path(entry.path), [*parts, entry.name]))
        level = deeper
    return [(path, parts) for path, parts in level if path.is_file()]


def _read_manifest(
    root: Path, manifest: Path, parts: list[str], problems: list[SourceProblem]
) -> FoundFile | None:
    registry, namespace, name, tag = parts
    shown = _ollama_name(registry, namespace, name, tag)
    try:
        with open(manifest, "rb") as f:
            data: Any = json.loads(f.read(MAX_MANIFEST_BYTES))
    except OSError as exc:
        problems.append(unreadable(SOURCE, manifest, exc))
        return None
    except ValueError:
        problems.append(
            SourceProblem(
                SOURCE,
                str(manifest),
                f"Ollama's manifest of {shown} is not valid JSON, so {shown} cannot run. "
                f"Run `ollama pull {shown}` again.",
            )
        )
        return None
    layers = data.get("layers") if isinstance(data, dict) else None
    model = [
        layer
        for layer in layers or []
        if isinstance(layer, dict) and layer.get("mediaType") == MODEL_LAYER
    ]
    if not model:
        return None  # not a GGUF model (safetensors tensors, an adapter-only manifest)
    digest = model[0].get("digest")
    if not is_digest(digest):
        problems.append(
            SourceProblem(
                SOURCE,
                str(manifest),
                f"Ollama's manifest of {shown} names its model by a malformed digest, so "
                f"{shown} cannot run. Run `ollama pull {shown}` again.",
            )
        )
        return None
    blob = root / "blobs" / str(digest).replace(":", "-", 1)
    st = stat_file(blob)
    if st is None:
        problems.append(
            SourceProblem(
                SOURCE,
                str(manifest),
                f"Ollama's manifest of {shown} names the blob {blob.name[:19]}…, which is not "
                f"in {blob.parent} (an interrupted pull, or a pruned store), so {shown} cannot "
                f"run. Run `ollama pull {shown}` again.",
            )
        )
        return None
    return FoundFile(
        blob.absolute(),
        st.st_size,
        st.st_mtime_ns,
        source=SOURCE,
        name=source_model_id(_name_parts(registry, namespace, name), tag),
        published_digest=str(digest),
    )


def _name_parts(registry: str, namespace: str, name: str) -> list[str]:
    if registry in DEFAULT_REGISTRIES:
        return [name] if namespace == "library" else [namespace, name]
    return [registry, namespace, name]


def _ollama_name(registry: str, namespace: str, name: str, tag: str) -> str:
    return "/".join(_name_parts(registry, namespace, name)) + f":{tag}"
