"""What the registry tells the rest of the app: ModelInfo (one model) and ModelEvent (news)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmsp_desktop.core.models.demo import DEMO_MODEL_ID
from lmsp_desktop.core.models.discovery import missing_parts, part_paths, stat_file

# Registry states. "hashing" is never stored: a process that dies mid-hash leaves the row
# "unverified", which is the truth, and the next scan hashes it again.
UNVERIFIED = "unverified"
HASHING = "hashing"
VERIFIED = "verified"
CHANGED = "changed"
# What a verify found in a verified model's file that no longer matches its digest, kept in
# the row's meta while it stays `changed`: its digest, size, and why it is no model if so.
OBSERVED = ("observed_digest", "observed_size_bytes", "observed_error")
# The meta key of a split model's bytes, all its parts (`…-00001-of-00003.gguf` and the rest):
# its size wherever it is shown. The `size_bytes` column is its first part's (the file a
# scan and a run compare with the disk).
PARTS_SIZE = "parts_size_bytes"
# The meta key of a split model's other parts (2..n), in order: each one's `name`,
# `size_bytes` and `mtime_ns` as recorded (compared with the disk by a scan and a run, as the
# first part's columns are) and, once hashed, its `digest`. The model's `digest` column is
# its first part's own sha256 (which a store's published digest names); every part is
# hashed at each verify, and any part's other digest makes the model `changed`.
PARTS = "parts"
MISSING = "missing"
# Not a GGUF file the engine can load (not GGUF at all, truncated, unreadable header): listed
# with the reason (meta["error"]), never verified, never offered to run.
INVALID = "invalid"

API_LOADED_STATES = ("unloaded", "loading", "loaded")


def short_alias(model_id: str, alias: str) -> str:
    """An alias as its tag alone (":latest") where it names the same model as `model_id`
    (Ollama's `smollm2:latest` beside `smollm2:135m`), else whole."""
    name, colon, _ = model_id.rpartition(":")
    if colon and alias.startswith(f"{name}:"):
        return alias[len(name) :]
    return alias


def name_text(model_id: str, aliases: list[str]) -> str:
    """`smollm2:135m (also :latest)`: a model's id and its other names (ModelInfo.name_text)."""
    if not aliases:
        return model_id
    return f"{model_id} (also {', '.join(short_alias(model_id, a) for a in aliases)})"


def source_of(model_id: str, meta: dict[str, Any] | str | None) -> str:
    """Where a local model was found: folder, lmstudio, ollama, huggingface or demo."""
    if isinstance(meta, str):
        meta = json.loads(meta) if meta else {}
    source = (meta or {}).get("source")
    if isinstance(source, str):
        return source
    # Rows recorded before stores were read have no `source` in meta: the demo or a folder.
    return "demo" if model_id == DEMO_MODEL_ID else "folder"


@dataclass
class ModelInfo:
    """One registered model file: where it is, its digest and verification state, its header."""

    id: str
    path: Path
    size_bytes: int
    mtime_ns: int
    digest: str | None
    state: str
    verified_at: int | None
    architecture: str | None
    parameters: int | None
    quantization: str | None
    context_length: int | None
    created_at: int
    chat_template: str | None = None
    name: str | None = None
    # Other values kept in the `meta` column: header error, a mismatching digest seen by
    # verify ("observed_digest"), the GGUF version.
    meta: dict[str, Any] = field(default_factory=dict)
    hashing: bool = False  # its digest is being computed right now (scan or verify)
    # Its file's own bytes as recorded, which a run compares with the disk: a split model's
    # first part (its `size_bytes` counts every part); None: `size_bytes`.
    file_bytes: int | None = None

    def __copy__(self) -> ModelInfo:
        """What copy.copy gives (the same fields, shallow), without its generic reduce path:
        the registry hands every create its own copy (B1: 4.4 -> 1.4 us)."""
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied

    @property
    def runnable(self) -> bool:
        return self.state == VERIFIED

    @property
    def source(self) -> str:
        return source_of(self.id, self.meta)

    @property
    def aliases(self) -> list[str]:
        """The other names the model's store gives its file (an Ollama blob tagged twice:
        `smollm2:latest` beside `smollm2:135m`); each finds the model as its id does."""
        value = self.meta.get("aliases")
        return [a for a in value if isinstance(a, str)] if isinstance(value, list) else []

    @property
    def names(self) -> list[str]:
        """Its id, then its aliases."""
        return [self.id, *self.aliases]

    @property
    def name_text(self) -> str:
        """Its id and, for a file its store tags twice, its other names (`smollm2:135m (also
        :latest)`), as the Models page and `lmsp-desktop models list` show it: `ollama list`
        shows each tag, and each runs the model, so a user who knows it as `smollm2:latest`
        finds it there too."""
        return name_text(self.id, self.aliases)

    @property
    def published_digest(self) -> str | None:
        """The sha256 the model's store names it by (Ollama, Hugging Face), if any."""
        value = self.meta.get("published_digest")
        return value if isinstance(value, str) else None

    @property
    def digest_matches(self) -> bool | None:
        """Whether our own hash equals the published digest; None until both are known."""
        if self.published_digest is None or self.digest is None:
            return None
        return self.digest == self.published_digest

    @property
    def missing_reason(self) -> str | None:
        """Why a missing split model is missing when its first part is still there (the one
        its path names): which of its other parts are gone. None otherwise. It stats them."""
        if self.state != MISSING or stat_file(self.path) is None:
            return None
        gone = missing_parts(self.path)
        if not gone:
            return None
        count = len(part_paths(self.path))
        which = "part" if len(gone) == 1 else "parts"
        return (
            f"its {which} {', '.join(gone)} ({len(gone)} of its {count} parts) "
            f"{'is' if len(gone) == 1 else 'are'} gone from beside its first part"
        )

    @property
    def invalid_reason(self) -> str | None:
        if self.state != INVALID:
            return None
        reason = self.meta.get("error")
        return reason if isinstance(reason, str) else "it is not a GGUF model file"

    @classmethod
    def from_row(cls, row: sqlite3.Row, *, hashing: bool = False) -> ModelInfo:
        meta: dict[str, Any] = json.loads(row["meta"]) if row["meta"] else {}
        template = meta.get("chat_template")
        name = meta.get("name")
        parts = meta.get(PARTS_SIZE)
        return cls(
            id=row["id"],
            path=Path(row["path"]),
            size_bytes=parts if isinstance(parts, int) and parts > 0 else row["size_bytes"],
            mtime_ns=row["mtime_ns"],
            digest=row["digest"],
            # Re-verifying a verified model does not stop it from running meanwhile.
            state=HASHING if hashing and row["state"] != VERIFIED else row["state"],
            verified_at=row["verified_at"],
            architecture=row["architecture"],
            parameters=row["parameters"],
            quantization=row["quantization"],
            context_length=row["context_length"],
            created_at=row["created_at"],
            chat_template=template if isinstance(template, str) else None,
            name=name if isinstance(name, str) else None,
            meta=meta,
            hashing=hashing,
            file_bytes=row["size_bytes"],
        )

    def api_state(self, loaded_state: str = "unloaded") -> str:
        """The `GET /v1/models` state: missing/changed/invalid as they are, else the runner's.

        An unverified model (digest still being computed) is reported `unloaded`: the API has
        no state for it, and running it is refused with 409 model_unverified meanwhile.
        """
        if self.state in (MISSING, CHANGED, INVALID):
            return self.state
        if loaded_state not in API_LOADED_STATES:
            raise ValueError(f"loaded_state must be one of {API_LOADED_STATES}")
        return loaded_state if self.state == VERIFIED else "unloaded"

    def as_api(self, loaded_state: str = "unloaded") -> dict[str, Any]:
        """The item of `GET /v1/models` (LMSP_API.md, Models)."""
        item: dict[str, Any] = {
            "id": self.id,
            "object": "model",
            "created": self.created_at,
            "owned_by": "local",
            "digest": self.digest,
            "size_bytes": self.size_bytes,
            "format": "gguf",
            "architecture": self.architecture,
            "parameters": self.parameters,
            "quantization": self.quantization,
            "context_length": self.context_length,
            "state": self.api_state(loaded_state),
            "verified_at": self.verified_at,
            "source": self.source,
        }
        if self.aliases:
            item["aliases"] = self.aliases
        if self.published_digest is not None:
            item["published_digest"] = self.published_digest
            item["digest_matches"] = self.digest_matches
        if self.state == INVALID:
            item["reason"] = self.invalid_reason
        elif self.state == MISSING:
            missing = self.missing_reason
            if missing is not None:
                item["reason"] = missing
        return item


@dataclass(frozen=True)
class ModelEvent:
    """News for listeners (the GUI's models panel): hashing progress and state changes.

    kind is "progress" (bytes_done/bytes_total of this file, total_done/total_bytes of the
    whole scan or verify), "state" (the model's state changed to `state`), "removed" (a scan
    forgot the model: its name is another model's now), or "scan_finished".
    """

    kind: str
    model_id: str | None = None
    state: str | None = None
    bytes_done: int = 0
    bytes_total: int = 0
    total_done: int = 0
    total_bytes: int = 0
