"""B6 digests: sha256 of a 2 GiB file by the registry's hasher vs hashlib.file_digest and
coreutils sha256sum; bytes read when rescanning 50 unchanged models."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import time
from pathlib import Path

from bench.common import make_gguf
from bench.report import Row
from lmsp_desktop.core.models.digest_cache import DigestCache
from lmsp_desktop.core.models.digests import sha256_file
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.db import Database

BLOCK = 4 * 1024 * 1024


def make_file(path: Path, size: int) -> None:
    """Real (not sparse) data: a random block repeated, so every page exists."""
    block = os.urandom(BLOCK)
    with path.open("wb") as f:
        for _ in range(size // BLOCK):
            f.write(block)


def timed(fn: object) -> tuple[float, str]:
    start = time.perf_counter()
    digest = fn()  # type: ignore[operator]
    return time.perf_counter() - start, str(digest)


def ours(path: Path) -> str:
    return sha256_file(path).removeprefix("sha256:")


def stdlib(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def coreutils(path: Path) -> str:
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def read_bytes_of_process() -> int:
    """rchar of /proc/self/io: every byte this process read through read() calls."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return -1


async def rescan(work: Path, count: int) -> dict[str, float]:
    folder = work / "b6-models"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        make_gguf(folder / f"model-{i:02d}.gguf", f"model {i}", tensor_bytes=256 * 1024)
    db = Database(work / "b6-db" / "lmsp.db")
    await db.open()
    # The machine's digests (the app passes one per machine): a second data folder reads them.
    digests = DigestCache(work / "b6-cache" / "model-digests.json")
    first = ModelRegistry(db, [folder], include_demo=False, digests=digests)
    await first.scan()
    again = ModelRegistry(db, [folder], include_demo=False)  # as after a restart
    rchar = read_bytes_of_process()
    start = time.perf_counter()
    await again.scan()
    elapsed = time.perf_counter() - start
    rchar = read_bytes_of_process() - rchar
    verified = len([m for m in await again.list_models() if m.state == "verified"])
    other_db = Database(work / "b6-db-2" / "lmsp.db")  # `serve --data-dir X` beside the window
    await other_db.open()
    other = ModelRegistry(other_db, [folder], include_demo=False, digests=digests)
    await other.scan()
    verified_other = len([m for m in await other.list_models() if m.state == "verified"])
    await first.close()
    await again.close()
    await other.close()
    await db.close()
    await other_db.close()
    return {
        "first": first.bytes_hashed,
        "again": again.bytes_hashed,
        "seconds": elapsed,
        "rchar": rchar,
        "verified": verified,
        "other": other.bytes_hashed,
        "verified_other": verified_other,
    }


def run(work: Path, quick: bool) -> list[Row]:
    size = (64 if quick else 2048) * 1024 * 1024
    repeats = 1 if quick else 2
    big = work / "b6-big.bin"
    make_file(big, size)
    stdlib(big)  # warm the page cache: every path then reads from memory alike
    best: dict[str, float] = {}
    digests = set()
    for _ in range(repeats):
        for name, fn in (("ours", ours), ("hashlib", stdlib), ("sha256sum", coreutils)):
            seconds, digest = timed(lambda fn=fn: fn(big))
            digests.add(digest)
            best[name] = min(best.get(name, float("inf")), seconds)
    big.unlink()
    if len(digests) != 1:
        raise AssertionError(f"the three hashers disagree: {digests}")
    gbs = {k: size / v / 1e9 for k, v in best.items()}
    models = 50
    scan = asyncio.run(rescan(work, models))
    for key in ("verified", "verified_other"):
        if scan[key] != models:
            raise AssertionError(f"only {scan[key]} of {models} models verified ({key})")
    gib = size / 2**30
    return [
        Row("B6", f"hashlib.file_digest, {gib:g} GiB (page cache warm)", gbs["hashlib"], "GB/s"),
        Row("B6", f"sha256sum, {gib:g} GiB", gbs["sha256sum"], "GB/s"),
        Row(
            "B6",
            f"registry sha256_file, {gib:g} GiB",
            gbs["ours"],
            "GB/s",
            "≥ 0.95× hashlib",
            gbs["ours"] / gbs["hashlib"],
            "hashlib",
            gbs["ours"] >= 0.95 * gbs["hashlib"],
            note=f"{gbs['ours'] / gbs['sha256sum']:.2f}× sha256sum; best of {repeats}; the file "
            "is in the page cache, so this is hashing speed, not disk speed",
        ),
        Row(
            "B6",
            f"bytes hashed rescanning {models} unchanged models",
            scan["again"],
            "bytes",
            "0 bytes",
            None,
            "",
            scan["again"] == 0,
            note=f"first scan hashed {scan['first']:,.0f} bytes; the rescan took "
            f"{scan['seconds'] * 1000:.0f} ms and read {scan['rchar']:,.0f} bytes in all "
            "(/proc/self/io rchar: SQLite pages, no model data)",
        ),
        Row(
            "B6",
            f"bytes hashed by a second data folder scanning {models} unchanged models",
            scan["other"],
            "bytes",
            "0 bytes",
            None,
            "",
            scan["other"] == 0,
            note=f"the per-machine digest cache (before it: {scan['first']:,.0f} bytes, "
            "every model read whole again)",
        ),
    ]
