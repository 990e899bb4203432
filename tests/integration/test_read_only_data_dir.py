"""A data directory (or database) this user cannot write: one line naming it and what to do,
not a traceback (a reviewer's serve ended with PermissionError from logs.py, and with
"sqlite3.OperationalError: attempt to write a readonly database" from the writer)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from lmsp_desktop.core.errors import StorageReadOnlyError
from lmsp_desktop.core.storage.db import translate

# Root writes anything whatever its mode: the command runs without the capabilities that
# let it (as a user would be), where util-linux's setpriv can drop them.
AS_USER = (
    ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]
    if os.geteuid() == 0
    else []
)
needs_permissions = pytest.mark.skipif(
    os.geteuid() == 0 and shutil.which("setpriv") is None,
    reason="running as root without setpriv: file modes do not apply",
)


def lmsp(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AS_USER, sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_read_only_database_is_named_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.commit()
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as caught:
        reader.execute("INSERT INTO t VALUES (1)")
    error = translate(caught.value, path)
    assert isinstance(error, StorageReadOnlyError) and str(path) in error.message
    assert "--data-dir" in error.message


@needs_permissions
def test_serve_in_a_folder_it_cannot_write_says_so_in_one_line(tmp_path: Path) -> None:
    parent = tmp_path / "locked"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        done = lmsp(parent / "data", "serve", "--port", "0")
    finally:
        parent.chmod(0o755)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"lmsp-desktop: cannot write {parent / 'data'} (permission denied). Give this user "
        "write access to the data directory, or choose another with --data-dir (or "
        "LMSP_DATA_DIR)."
    ], done.stderr


@needs_permissions
def test_serve_on_a_database_it_cannot_write_says_so_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    made = lmsp(data, "token", "create", "--name", "first")
    assert made.returncode == 0, made.stderr
    (data / "lmsp.db").chmod(0o400)
    done = lmsp(data, "serve", "--port", "0")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot be written" in lines[0], done.stderr
    assert str(data / "lmsp.db") in lines[0] and "Traceback" not in done.stderr
