"""The `model_settings` table: each model's own load settings (context, concurrent
requests, KV cache type, GPU layers). Written by `models set` and the Models page, read at
each load, so a change applies at the model's next load."""

from __future__ import annotations

import sqlite3
import time

from lmsp_desktop.core.engines.base import KV_TYPES
from lmsp_desktop.core.errors import invalid
from lmsp_desktop.core.models.memory import SMALLEST_CONTEXT, ModelSettings
from lmsp_desktop.core.storage.db import Database

MAX_PARALLEL = 64  # llama.cpp's LLAMA_MAX_SEQ is 256; more than this is a typo


def check(settings: ModelSettings) -> ModelSettings:
    """The settings, or 400 naming the field and what it accepts."""
    context = settings.context_length
    if context is not None and context < SMALLEST_CONTEXT:
        raise invalid(
            f"The context must be at least {SMALLEST_CONTEXT} tokens (or auto); got {context}.",
            "context_length",
        )
    if settings.parallel is not None and not 1 <= settings.parallel <= MAX_PARALLEL:
        raise invalid(
            f"Concurrent requests must be between 1 and {MAX_PARALLEL}; got {settings.parallel}.",
            "parallel",
        )
    if settings.kv_type not in KV_TYPES:
        raise invalid(
            f"The KV cache type must be one of {', '.join(KV_TYPES)}; got {settings.kv_type!r}.",
            "kv_type",
        )
    if settings.gpu_layers is not None and settings.gpu_layers < -1:
        raise invalid("GPU layers must be auto, all (-1) or a number from 0.", "gpu_layers")
    return settings


async def get_settings(db: Database, model_id: str) -> ModelSettings:
    row = await db.fetchone("SELECT * FROM model_settings WHERE model_id = ?", (model_id,))
    return _from_row(row) if row is not None else ModelSettings()


async def all_settings(db: Database) -> dict[str, ModelSettings]:
    rows = await db.fetchall("SELECT * FROM model_settings")
    return {row["model_id"]: _from_row(row) for row in rows}


async def save_settings(db: Database, model_id: str, settings: ModelSettings) -> ModelSettings:
    check(settings)

    def write(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO model_settings (model_id, context_length, parallel, kv_type,"
            " gpu_layers, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (model_id) DO UPDATE SET context_length = excluded.context_length,"
            " parallel = excluded.parallel, kv_type = excluded.kv_type,"
            " gpu_layers = excluded.gpu_layers, updated_at = excluded.updated_at",
            (
                model_id,
                settings.context_length,
                settings.parallel,
                settings.kv_type,
                settings.gpu_layers,
                time.time(),
            ),
        )

    await db.run(write)
    return settings


def _from_row(row: sqlite3.Row) -> ModelSettings:
    return ModelSettings(
        context_length=row["context_length"],
        parallel=row["parallel"],
        kv_type=row["kv_type"],
        gpu_layers=row["gpu_layers"],
    )
