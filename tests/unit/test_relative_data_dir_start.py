"""A relative `--data-dir` (the reviewer's `--data-dir ro/data`) on its second start: the
integrity check beside the first writes died on Path.as_uri() ("relative path can't be
expressed as a file URI") in its thread, the first commit waited for it for ever, and
`serve` hung before listening, deaf to SIGTERM."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lmsp_desktop.core.storage.db import Database

HANG_GUARD_S = 60  # a hang guard only: the commit takes milliseconds


async def test_a_relative_database_path_opened_again_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = Database(Path("data") / "lmsp.db")
    await first.open(check_beside=True)  # a new file: checked before open() returns
    await first.close()
    again = Database(Path("data") / "lmsp.db")
    await again.open(check_beside=True)  # now a WAL file of this version: checked beside
    commit = again.run(lambda conn: conn.execute("PRAGMA user_version").fetchone()[0])
    try:
        done = await asyncio.wait_for(commit, HANG_GUARD_S)
    except TimeoutError:
        check = again._integrity
        if check is not None and not check.done():
            check.set_result(None)  # let the writer go, so that close() can end
        pytest.fail("the first commit still waits for the integrity check")
    finally:
        await again.close()
    assert done > 0
