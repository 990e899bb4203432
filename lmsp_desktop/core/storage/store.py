"""The store as one object: the database, the task state machine, and service config."""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lmsp_desktop.core.config import Settings, database_path
from lmsp_desktop.core.storage.db import DEFAULT_SYNCHRONOUS, Database
from lmsp_desktop.core.storage.tasks import TaskStore


class Store:
    """Opens the data directory's database and gives access to its parts."""

    def __init__(self, data_dir: Path, *, synchronous: str = DEFAULT_SYNCHRONOUS) -> None:
        self.data_dir = Path(data_dir)
        self.db = Database(database_path(self.data_dir), synchronous=synchronous)
        self.tasks = TaskStore(self.db)
        self.service_id = ""
        self._identity_unsaved = False

    async def open(
        self,
        *,
        check_beside: bool = False,
        before_writes: Callable[[Settings], Awaitable[None]] | None = None,
    ) -> None:
        """Open the database (Database.open: `check_beside` lets its integrity check run
        beside the first writes, which commit only once it has passed). `before_writes`
        gets the stored settings (a new file's: the defaults) before anything in the file
        changes: the service binds its port there, so that a start that cannot listen
        leaves the store as it was."""

        async def with_settings() -> None:
            assert before_writes is not None
            await before_writes(await self._settings_as_found())

        await self.db.open(
            check_beside=check_beside,
            before_writes=None if before_writes is None else with_settings,
        )
        self.service_id = await self.get_config("service_id", "")
        if not self.service_id:
            self.service_id = "svc_" + secrets.token_hex(8)
            self._identity_unsaved = True
            if not check_beside:  # else the caller's first write saves it (save_identity)
                await self.db.run(self.save_identity)

    def save_identity(self, conn: sqlite3.Connection) -> None:
        """Inside a write: record a new database's identity (its service id), once. With
        `open(check_beside=True)` the caller's first transaction does, so that nothing has
        to commit before that one (which waits for the integrity check)."""
        if not self._identity_unsaved:
            return
        for key, value in (("service_id", self.service_id), ("created_at", int(time.time()))):
            conn.execute(
                "INSERT OR REPLACE INTO service_config (key, value) VALUES (?, ?)",
                (key, json.dumps(value)),
            )
        self._identity_unsaved = False

    async def close(self) -> None:
        await self.db.close()

    async def get_config(self, key: str, default: Any = None) -> Any:
        row = await self.db.fetchone("SELECT value FROM service_config WHERE key=?", (key,))
        return json.loads(row["value"]) if row else default

    async def set_config(self, key: str, value: Any) -> None:
        await self.db.run(
            lambda conn: conn.execute(
                "INSERT OR REPLACE INTO service_config (key, value) VALUES (?, ?)",
                (key, json.dumps(value)),
            ).close()
        )

    async def settings(self) -> Settings:
        return Settings.from_json(await self.get_config("settings", {}))

    async def _settings_as_found(self) -> Settings:
        """The settings stored, read before the file is migrated: schema 1 on all have them
        in service_config; a new file has no tables yet."""
        if await self.db.user_version() == 0:
            return Settings()
        return await self.settings()

    async def save_settings(self, settings: Settings) -> None:
        await self.set_config("settings", settings.validate().as_json())
