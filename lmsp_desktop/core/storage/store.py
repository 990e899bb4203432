"""The store as one object: the database, the task state machine, and service config."""

from __future__ import annotations

import json
import secrets
import time
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

    async def open(self) -> None:
        await self.db.open()
        self.service_id = await self.get_config("service_id", "")
        if not self.service_id:
            self.service_id = "svc_" + secrets.token_hex(8)
            await self.set_config("service_id", self.service_id)
            await self.set_config("created_at", int(time.time()))

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

    async def save_settings(self, settings: Settings) -> None:
        await self.set_config("settings", settings.validate().as_json())
