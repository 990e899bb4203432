"""Whole-file digests kept per machine (digest_cache.py): registries over other data folders
(other SQLite files) on one cache, the hashing counted at the registry's sha256_file."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.models import hashing
from lmsp_desktop.core.models.digest_cache import DigestCache
from lmsp_desktop.core.models.digests import sha256_file as real_sha256_file
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.store import Store
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_registry import sha256, touch_later


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path.resolve() / "models"
    path.mkdir()
    return path


@pytest.fixture
def cache(tmp_path: Path) -> DigestCache:
    return DigestCache(tmp_path / "cache" / "model-digests.json")


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the registry reads whole to hash it."""
    calls: list[Path] = []

    def counted(path: Path, **kwargs: Any) -> str:
        calls.append(path)
        return real_sha256_file(path, **kwargs)

    monkeypatch.setattr(hashing, "sha256_file", counted)
    return calls


class DataFolders:
    """A registry over a new data folder (its own SQLite file) at each call."""

    def __init__(self, base: Path, folder: Path, cache: DigestCache) -> None:
        self.base, self.folder, self.cache = base, folder, cache
        self.stores: list[Store] = []

    async def scan(self) -> ModelRegistry:
        store = Store(self.base / f"data-{len(self.stores)}")
        await store.open()
        self.stores.append(store)
        reg = ModelRegistry(store.db, [self.folder], include_demo=False, digests=self.cache)
        await reg.scan()
        return reg


@pytest.fixture
async def folders(tmp_path: Path, folder: Path, cache: DigestCache) -> AsyncIterator[DataFolders]:
    made = DataFolders(tmp_path, folder, cache)
    try:
        yield made
    finally:
        for store in made.stores:
            await store.close()


async def test_a_second_data_folder_does_not_hash_the_unchanged_file(
    folders: DataFolders, folder: Path, hashed: list[Path]
) -> None:
    path = write_gguf(folder / "m.gguf")
    first = await folders.scan()
    assert hashed == [path]
    second = await folders.scan()
    assert hashed == [path]  # not read again
    assert second.bytes_hashed == 0
    model = await second.get("m")
    assert (model.state, model.digest) == ("verified", sha256(path))
    assert await second.path_for_run("m") == path
    assert (await first.get("m")).digest == model.digest


async def test_a_hard_link_under_another_name_is_the_same_file(
    folders: DataFolders, folder: Path, hashed: list[Path]
) -> None:
    path = write_gguf(folder / "m.gguf")
    await folders.scan()
    other = folder.parent / "elsewhere"
    other.mkdir()
    os.link(path, other / "n.gguf")
    folders.folder = other
    reg = await folders.scan()
    assert hashed == [path]
    assert (await reg.get("n")).state == "verified"


async def test_a_file_whose_mtime_or_size_moved_is_hashed_again(
    folders: DataFolders, folder: Path, hashed: list[Path]
) -> None:
    path = write_gguf(folder / "m.gguf")
    await folders.scan()
    touch_later(path)
    reg = await folders.scan()
    assert hashed == [path, path]
    assert (await reg.get("m")).state == "verified"
    mtime = path.stat().st_mtime_ns
    path.write_bytes(path.read_bytes() + b"\0" * 32)  # the mtime set back: only the size moved
    os.utime(path, ns=(mtime, mtime))
    reg = await folders.scan()
    assert hashed == [path, path, path]
    assert (await reg.get("m")).digest == sha256(path)


async def test_verify_now_always_reads_the_file(
    folders: DataFolders, folder: Path, hashed: list[Path]
) -> None:
    path = write_gguf(folder / "m.gguf")
    await folders.scan()
    reg = await folders.scan()
    await reg.verify("m")
    assert hashed == [path, path]


async def test_a_corrupted_cache_file_is_ignored_and_rewritten(
    folders: DataFolders, folder: Path, cache: DigestCache, hashed: list[Path]
) -> None:
    path = write_gguf(folder / "m.gguf")
    cache.path.parent.mkdir(parents=True)
    cache.path.write_text('{"version": 1, "digests": {"1:2": [3, ')
    reg = await folders.scan()
    assert hashed == [path]
    assert (await reg.get("m")).state == "verified"
    kept = json.loads(cache.path.read_text())["digests"]
    assert [entry[2] for entry in kept.values()] == [sha256(path)]
    await folders.scan()
    assert hashed == [path]


async def test_a_wrong_digest_in_the_cache_is_not_taken_for_another_size(
    folders: DataFolders, folder: Path, cache: DigestCache, hashed: list[Path]
) -> None:
    """A foreign entry for the same inode but another size (a file replaced in place) is
    not this file's digest."""
    path = write_gguf(folder / "m.gguf")
    st = path.stat()
    cache.path.parent.mkdir(parents=True)
    cache.path.write_text(
        json.dumps(
            {
                "version": 1,
                "digests": {
                    f"{st.st_dev}:{st.st_ino}": [
                        st.st_size + 1,
                        st.st_mtime_ns,
                        "sha256:" + "0" * 64,
                    ]
                },
            }
        )
    )
    reg = await folders.scan()
    assert hashed == [path]
    assert (await reg.get("m")).digest == sha256(path)


async def test_a_file_written_while_hashed_is_not_kept(
    folders: DataFolders, folder: Path, cache: DigestCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_gguf(folder / "m.gguf")

    def written_meanwhile(p: Path, **kwargs: Any) -> str:
        digest = real_sha256_file(p, **kwargs)
        touch_later(p)  # a download still writing it
        return digest

    monkeypatch.setattr(hashing, "sha256_file", written_meanwhile)
    reg = await folders.scan()
    assert (await reg.get("m")).state == "unverified"
    assert cache.get(path, path.stat()) is None
    assert not cache.path.exists()


async def test_a_published_digest_that_does_not_match_still_shows(
    folders: DataFolders, folder: Path, hashed: list[Path]
) -> None:
    """The digest taken from the cache is checked as a fresh one is: against the digest
    the file's publisher announced (here written into the second data folder's row)."""
    path = write_gguf(folder / "m.gguf")
    await folders.scan()
    store = Store(folders.base / "data-published")
    await store.open()
    folders.stores.append(store)
    await ModelRegistry(store.db, [folder], include_demo=False, digests=folders.cache).scan()

    published = "sha256:" + "1" * 64
    await store.db.run(
        lambda conn: conn.execute(
            "UPDATE models SET meta = json_set(COALESCE(meta, '{}'), '$.published_digest', ?),"
            " state = 'unverified', digest = NULL WHERE id = 'm'",
            (published,),
        ).close()
    )
    again = ModelRegistry(store.db, [folder], include_demo=False, digests=folders.cache)
    await again.scan()
    model = await again.get("m")
    assert hashed == [path]
    assert model.state == "invalid"
    assert model.invalid_reason is not None and published in model.invalid_reason
    assert model.digest == sha256(path) and model.digest_matches is False


def _record(cache_file: str, paths: list[str], ready: Any) -> None:
    ready.wait()  # both processes started: their writes overlap
    cache = DigestCache(Path(cache_file))
    for name in paths:
        path = Path(name)
        cache.put(path, path.stat(), fake_digest(path))


def fake_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.name.encode()).hexdigest()


def test_two_processes_recording_at_once_leave_a_readable_cache(tmp_path: Path) -> None:
    """Both processes' digests are kept: neither rewrites the file from a read made before
    the other's write (a lost digest is a whole model read again)."""
    files = []
    for i in range(60):
        files.append(tmp_path / f"m{i}.gguf")
        files[-1].write_bytes(b"x" * i)
    cache_file = tmp_path / "cache" / "model-digests.json"
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(2)
    workers = [
        context.Process(target=_record, args=(str(cache_file), [str(f) for f in part], ready))
        for part in (files[::2], files[1::2])
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    json.loads(cache_file.read_text())  # whole, never half written
    cache = DigestCache(cache_file)
    assert [cache.get(f, f.stat()) for f in files] == [fake_digest(f) for f in files]
