"""The start-up scan runs in the background (ModelRegistry.start_scan): lookups and runs wait
for what it has not settled instead of answering "not found" or "not verified". A real
SQLite file and small GGUF files; the service-level check is
tests/integration/test_launch_scan.py."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models import hashing
from lmsp_desktop.core.models.digests import HashCancelled
from lmsp_desktop.core.models.digests import sha256_file as real_sha256_file
from lmsp_desktop.core.storage.store import Store
from tests.support.polling import until
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_registry import registry


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path.resolve() / "models"  # the registry records resolved paths
    path.mkdir()
    return path


async def test_a_model_the_start_up_scan_has_not_recorded_yet_is_found(
    store: Store, folder: Path
) -> None:
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    reg.start_scan()
    try:
        assert (await reg.get("m")).path == path  # was 404 model_not_found before the record
        assert [m.id for m in await reg.list_models()] == ["m"]  # never a half-recorded list
        assert await reg.path_for_run("m") == path  # waits for the hash, then runs
    finally:
        await reg.close()


async def test_a_run_waiting_for_a_hash_that_was_abandoned_is_told_so(
    store: Store, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_gguf(folder / "m.gguf")

    def abandoned(*_args: Any, **_kwargs: Any) -> str:
        raise HashCancelled  # as when the app stops while hashing

    monkeypatch.setattr(hashing, "sha256_file", abandoned)
    reg = registry(store, folder)
    reg.start_scan()
    try:
        with pytest.raises(LmspError) as caught:
            await asyncio.wait_for(reg.path_for_run("m"), timeout=30)  # no hang
        assert caught.value.code == "model_unverified"
    finally:
        await reg.close()


async def test_a_second_start_scan_in_one_run_reads_nothing(store: Store, folder: Path) -> None:
    write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()  # the fixtures and benches scan before starting the service
    hashed = reg.bytes_hashed
    reg.start_scan()
    assert not reg.gate.recording
    assert (await reg.get("m")).state == "verified" and reg.bytes_hashed == hashed
    await reg.close()


async def test_wait_settled_returns_once_every_queued_hash_has_ended(
    store: Store, folder: Path
) -> None:
    write_gguf(folder / "a.gguf")
    write_gguf(folder / "b.gguf", vocab=3000)
    reg = registry(store, folder)
    reg.start_scan()
    try:
        await asyncio.wait_for(reg.gate.wait_settled(), timeout=30)
        assert {m.state for m in await reg.list_models()} == {"verified"}
    finally:
        await reg.close()


async def test_a_run_and_a_verify_during_the_hash_wait_for_it_and_read_the_file_once(
    store: Store, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_gguf(folder / "m.gguf")
    release = threading.Event()

    def held(*args: Any, **kwargs: Any) -> str:
        release.wait(timeout=30)  # hashing until the test has asked
        return real_sha256_file(*args, **kwargs)

    monkeypatch.setattr(hashing, "sha256_file", held)
    reg = registry(store, folder)
    reg.start_scan()
    try:
        await until(lambda: reg.get("m"), what="recorded")
        await until(lambda: "m" in reg._hashing, what="the hash under way")
        assert (await reg.get("m")).state == "hashing"
        run = asyncio.create_task(reg.path_for_run("m"))  # was model_unverified at once
        verify = asyncio.create_task(reg.verify("m"))  # was a second hash of the whole file
        release.set()
        assert await asyncio.wait_for(run, timeout=30) == path
        assert (await asyncio.wait_for(verify, timeout=30)).state == "verified"
        assert reg.bytes_hashed == path.stat().st_size
    finally:
        release.set()
        await reg.close()
