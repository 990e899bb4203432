"""Where data lives and the service settings kept in the store's `service_config`."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.models.memory import SMALLEST_CONTEXT
from lmsp_desktop.core.states import RestartPolicy

APP_NAME = "lmsp-desktop"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5677
# What a browser sends as `Origin`: scheme://host[:port], nothing after it (app:// and
# tauri:// too: desktop apps built on web views, Obsidian's plugins say app://obsidian.md).
ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#]+")


def default_data_dir() -> Path:
    """`LMSP_DATA_DIR` if set, else the platform's user data directory."""
    env = os.environ.get("LMSP_DATA_DIR")
    if env:
        return Path(env)
    # Imported here: a command given --data-dir (every `serve` a test or a unit file starts)
    # never asks, and platformdirs costs ~0.01 CPU-s to import.
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def default_cache_dir() -> Path:
    """`LMSP_CACHE_DIR` if set, else the platform's user cache directory: what can be
    recomputed (the exactness probe's verdicts), never user data."""
    env = os.environ.get("LMSP_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


def database_path(data_dir: Path) -> Path:
    return data_dir / "lmsp.db"


@dataclass
class Settings:
    """What a user can change in the Settings dialog; kept in `service_config`."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    model_dirs: list[str] = field(default_factory=list)
    retention_days: float = 7.0
    default_on_restart: str = RestartPolicy.FAIL.value
    max_loaded_models: int = 1
    idle_unload_s: float = 600.0
    # Concurrent requests per loaded model: they share its weights and are decoded together
    # (each costs its own KV cache; see docs/engine.md, "Batching").
    parallel_per_model: int = 4
    idempotency_ttl_s: int = 24 * 3600
    max_body_bytes: int = 1024 * 1024
    allowed_origins: list[str] = field(default_factory=list)
    # llama.cpp threads; 0 means one less than the cores, leaving one for the service and GUI
    # (on 2 busy cores two spinning llama.cpp threads ran 10-20x slower than one).
    engine_threads: int = 0
    # Caps every model's context (tokens); 0: each fitted to memory up to the default cap.
    max_context: int = 0
    # Other apps' model stores not looked in (lmstudio, ollama, huggingface); all are by default.
    disabled_sources: list[str] = field(default_factory=list)

    def enabled_sources(self) -> list[str]:
        from lmsp_desktop.core.models.sources import SOURCES

        return [s for s in SOURCES if s not in self.disabled_sources]

    def threads(self) -> int:
        return self.engine_threads or max(1, (os.cpu_count() or 2) - 1)

    def validate(self) -> Settings:
        if not 0 <= self.port <= 65535:
            raise invalid("The port must be between 0 and 65535.", "port")
        if self.retention_days <= 0:
            raise invalid("Retention must be a positive number of days.", "retention_days")
        if self.default_on_restart not in {p.value for p in RestartPolicy}:
            raise invalid("on_restart must be fail, retry or resume.", "default_on_restart")
        if self.max_loaded_models < 1:
            raise invalid("At least one model must be allowed to stay loaded.", "max_loaded_models")
        if self.max_context != 0 and self.max_context < SMALLEST_CONTEXT:
            raise invalid(
                f"Max context (Settings, or --max-context) must be 0 (each model's own, fitted "
                f"to memory) or at least {SMALLEST_CONTEXT} tokens; got {self.max_context}.",
                "max_context",
            )
        if self.parallel_per_model < 1:
            raise invalid("Concurrent requests per model must be at least 1.", "parallel_per_model")
        for origin in self.allowed_origins:
            if not ORIGIN.fullmatch(origin):
                raise invalid(
                    f"{origin!r} is not a browser origin: write the scheme, host and port the "
                    "page is served from, without a path, e.g. http://localhost:3000.",
                    "allowed_origins",
                )
        from lmsp_desktop.core.models.sources import SOURCES

        unknown = [s for s in self.disabled_sources if s not in SOURCES]
        if unknown:
            raise invalid(
                f"Unknown model source {unknown[0]!r}: the sources are {', '.join(SOURCES)}.",
                "disabled_sources",
            )
        return self

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Settings:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
