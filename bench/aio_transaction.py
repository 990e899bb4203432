"""`BEGIN IMMEDIATE … COMMIT` on a Database's aiosqlite writer, for the benchmarks' old
prototypes (group commit, fast recovery) that predate `Database.run`, the service's one way
to write. Benchmark code only: it reaches into the Database's writer and lock."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiosqlite

from lmsp_desktop.core.storage.db import Database, translate


@asynccontextmanager
async def transaction(db: Database) -> AsyncIterator[aiosqlite.Connection]:
    conn = db._writer
    if conn is None:
        raise RuntimeError("database is not open")
    async with db._lock:
        try:
            await conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise translate(exc, db.path) from exc
        try:
            yield conn
            await conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                await conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise translate(exc, db.path) from exc
            raise
    db._after_commit()
