"""Many rows in a few SQLite steps: multi-row INSERTs instead of `executemany`.

`executemany` runs one SQLite step per row, and each step lets go of the GIL and takes it
back. The writer thread's steps alternate with the event loop's Python: while the loop is
busy (reading 64 requests: B1; waking 32 appenders: B2), each take-back can wait for it,
so a group of 30 creates' three `executemany` took 6-10 ms instead of 2. A multi-row INSERT
is one step for up to CHUNK rows.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any

CHUNK = 256  # rows one INSERT takes at most (SQLite allows 32,766 variables a statement)


def insert_rows(conn: sqlite3.Connection, insert_sql: str, values: Sequence[Any]) -> None:
    """`executemany(insert_sql, rows)` for rows given flat (each row's values one after the
    other), as multi-row INSERTs of a power of two rows each (256, 128, ... 1): the
    statement cache keeps the nine shapes they take. `insert_sql` ends with its one row,
    `VALUES (?, ...)` (literals allowed)."""
    width = _width(insert_sql)
    left, at = len(values) // width, 0
    while left:
        n = min(CHUNK, 1 << (left.bit_length() - 1))
        conn.execute(_multi_row(insert_sql, n), values[at : at + n * width])
        at, left = at + n * width, left - n


@functools.cache
def _width(insert_sql: str) -> int:
    return _one_row(insert_sql).count("?")


@functools.cache
def _multi_row(insert_sql: str, n: int) -> str:
    row = _one_row(insert_sql)
    return insert_sql[: -len(row)] + ",".join([row] * n)


def _one_row(insert_sql: str) -> str:
    _, values, row = insert_sql.rpartition("VALUES ")
    if not values or not (row.startswith("(") and row.endswith(")")):
        raise ValueError(f"not a one-row INSERT: {insert_sql!r}")
    return row
