"""Multi-row INSERTs (storage/inserts.py): the rows the writer's batches write in a few
SQLite steps instead of one step each, every row once and in its order."""

from __future__ import annotations

import sqlite3

import pytest

from lmsp_desktop.core.storage.inserts import insert_rows

INSERT = "INSERT INTO t (n, state, label) VALUES (?, 'queued', ?)"


def test_rows_of_any_count_go_in_once_in_order_with_the_literals() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, n INTEGER, state TEXT, label TEXT)")
    steps: list[str] = []
    conn.set_trace_callback(steps.append)
    rows = [(i, f"row {i}") for i in range(300)]  # 256 + 32 + 8 + 4: more than one INSERT
    insert_rows(conn, INSERT, [x for row in rows for x in row])
    got = conn.execute("SELECT n, state, label FROM t ORDER BY k").fetchall()
    assert got == [(n, "queued", label) for n, label in rows]
    inserts = [sql for sql in steps if sql.startswith("INSERT")]
    assert len(inserts) == 4  # one statement per power-of-two chunk, not one per row


def test_no_rows_write_nothing_and_a_statement_without_one_row_is_refused() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, n INTEGER, state TEXT, label TEXT)")
    insert_rows(conn, INSERT, [])
    assert conn.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)
    with pytest.raises(ValueError, match="one-row INSERT"):
        insert_rows(conn, "INSERT INTO t SELECT 1, 2, 'x', 'y'", [1])
