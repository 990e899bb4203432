"""`serve` and the store commands on a real full or read-only disk (a tmpfs mounted for the
test): one sentence naming the path and what to do, exit 1, nothing half-made left, and a
full disk never called a damaged database (a reviewer's repro, moved aside, lost nothing but
the advice said to). Mounting needs root (CAP_SYS_ADMIN); elsewhere these skip, and
tests/unit/test_data_dir_refusals.py injects the same faults."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def lmsp(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lmsp_desktop", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> None:
    assert subprocess.run(["mountpoint", "-q", str(disk)], check=False).returncode == 0
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={disk / 'filler'}", "bs=64k"], capture_output=True, check=False
    )


def one_line(done: subprocess.CompletedProcess[str], *, starts: str) -> str:
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(starts), done.stderr
    return lines[0]


def test_a_full_disk_is_said_as_full_never_as_a_damaged_database(small_disk: Path) -> None:
    data = small_disk / "data"
    made = lmsp(data, "token", "create", "--name", "first")
    assert made.returncode == 0, made.stderr
    fill(small_disk)
    full = f"The disk holding {data} is full, so nothing was saved. Free some space"
    for args in (["serve", "--port", "0"], ["models", "list"]):
        said = one_line(
            lmsp(data, *args), starts=("lmsp-desktop: " if args[0] == "serve" else "") + full
        )
        assert "damaged" not in said
    new = small_disk / "new"
    one_line(lmsp(new, "serve", "--port", "0"), starts=f"lmsp-desktop: The disk holding {new}")
    assert not new.exists(), "a refused start left its empty lmsp.lock and logs/ behind"
    (small_disk / "filler").unlink()
    listed = lmsp(data, "clients", "list")
    assert listed.returncode == 0 and "first" in listed.stdout, listed.stderr


def test_a_read_only_disk_is_said_in_one_line(small_disk: Path) -> None:
    data = small_disk / "data"
    made = lmsp(data, "token", "create", "--name", "first")
    assert made.returncode == 0, made.stderr
    remount = ["mount", "-o", "remount,ro", str(small_disk)]
    assert subprocess.run(remount, check=False).returncode == 0
    one_line(lmsp(data, "serve", "--port", "0"), starts=f"lmsp-desktop: cannot write {data}")
    for args in (["models", "list"], ["token", "create", "--name", "second"]):
        one_line(lmsp(data, *args), starts=f"The database {data / 'lmsp.db'} cannot be written")
    new = small_disk / "new"
    said = one_line(lmsp(new, "serve", "--port", "0"), starts=f"lmsp-desktop: cannot write {new}")
    assert "read-only file system" in said and "--data-dir" in said
