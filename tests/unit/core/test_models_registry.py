"""The model registry on a real SQLite file with small GGUF files written by GGUFWriter."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models import hashing, scanning
from lmsp_desktop.core.models.digests import sha256_file as real_sha256_file
from lmsp_desktop.core.models.info import ModelEvent
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.store import Store
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_ids import HOSTILE_IDS

API_KEYS = {
    "id", "object", "created", "owned_by", "digest", "size_bytes", "format", "architecture",
    "parameters", "quantization", "context_length", "state", "verified_at", "source",
}  # fmt: skip


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path.resolve()  # the registry records resolved paths


@pytest.fixture
def folder(base: Path) -> Path:
    path = base / "models"
    path.mkdir()
    return path


def registry(store: Store, *folders: Path, chunk_size: int = 4096) -> ModelRegistry:
    return ModelRegistry(store.db, list(folders), include_demo=False, chunk_size=chunk_size)


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def touch_later(path: Path, seconds: int = 10) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 1_000_000_000))


async def refused(reg: ModelRegistry, model_id: str) -> LmspError:
    with pytest.raises(LmspError) as caught:
        await reg.path_for_run(model_id)
    return caught.value


async def test_scan_registers_files_with_digest_and_header(store: Store, folder: Path) -> None:
    path = write_gguf(folder / "Tiny-Chat.Q8_0.gguf", context_length=4096, file_type=7)
    reg = registry(store, folder)
    await reg.scan()
    [model] = await reg.list_models()
    assert model.id == "tiny-chat.q8_0"
    assert model.state == "verified"
    assert model.digest == sha256(path)
    assert model.size_bytes == path.stat().st_size
    assert (model.architecture, model.quantization, model.context_length) == ("llama", "Q8_0", 4096)
    assert model.parameters == 40
    assert model.chat_template is not None and "<|im_start|>" in model.chat_template
    assert await reg.path_for_run(model.id) == path
    item = model.as_api("loaded")
    assert set(item) == API_KEYS
    assert item["state"] == "loaded" and item["format"] == "gguf" and item["owned_by"] == "local"
    assert item["source"] == "folder"
    assert item["digest"] == sha256(path)


async def test_unchanged_rescan_reads_zero_bytes(store: Store, folder: Path) -> None:
    paths = [write_gguf(folder / f"m{i}.gguf", payload=bytes([i])) for i in range(3)]
    reg = registry(store, folder)
    await reg.scan()
    first = reg.bytes_hashed
    assert first == sum(p.stat().st_size for p in paths)
    await reg.scan()
    assert reg.bytes_hashed == first
    # A restarted app (new registry, same database) does not rehash either.
    again = registry(store, folder)
    await again.scan()
    assert again.bytes_hashed == 0
    assert {m.state for m in await again.list_models()} == {"verified"}


async def test_new_file_is_hashed_alone(store: Store, folder: Path) -> None:
    write_gguf(folder / "a.gguf")
    reg = registry(store, folder)
    await reg.scan()
    before = reg.bytes_hashed
    b = write_gguf(folder / "b.gguf", payload=b"b")
    await reg.scan()
    assert reg.bytes_hashed - before == b.stat().st_size
    assert [m.id for m in await reg.list_models()] == ["a", "b"]


async def test_touched_file_is_changed_refused_and_verified_again(
    store: Store, folder: Path
) -> None:
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()
    touch_later(path)
    await reg.scan()
    info = await reg.get("m")
    assert info.state == "changed"
    assert info.as_api("loaded")["state"] == "changed"
    error = await refused(reg, "m")
    assert (error.status, error.code, error.param) == (409, "model_changed", "model")
    assert "Verify" in error.message
    verified = await reg.verify("m")  # same bytes, new mtime: the digest still matches
    assert verified.state == "verified"
    assert verified.mtime_ns == path.stat().st_mtime_ns
    assert await reg.path_for_run("m") == path


async def test_rewritten_file_stays_changed_until_accepted(store: Store, folder: Path) -> None:
    path = write_gguf(folder / "m.gguf", context_length=2048)
    reg = registry(store, folder)
    await reg.scan()
    old_digest = (await reg.get("m")).digest
    write_gguf(path, context_length=8192, payload=b"new weights")
    touch_later(path)
    await reg.scan()
    assert (await reg.get("m")).state == "changed"
    # Verifying finds other bytes than were verified: still refused, the news is kept.
    checked = await reg.verify("m")
    assert checked.state == "changed"
    assert checked.digest == old_digest
    assert checked.meta["observed_digest"] == sha256(path)
    assert (await refused(reg, "m")).code == "model_changed"
    # Accepting the new file records its digest and its header.
    accepted = await reg.verify("m", accept_new=True)
    assert accepted.state == "verified"
    assert accepted.digest == sha256(path)
    assert accepted.context_length == 8192
    assert "observed_digest" not in accepted.meta
    assert await reg.path_for_run("m") == path
    # Still its folder's model (the header read again keeps where the file was found).
    assert [m.id for m in await registry(store).list_models()] == []


async def test_silent_corruption_is_noticed_by_verify(store: Store, folder: Path) -> None:
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # same size, mtime put back: only a digest can tell
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    await reg.scan()
    assert (await reg.get("m")).state == "verified"  # a scan only compares size and mtime
    assert (await reg.verify("m")).state == "changed"
    assert (await refused(reg, "m")).code == "model_changed"


async def test_verify_of_a_file_never_verified_reads_it_as_new_as_a_scan_does(
    store: Store, folder: Path
) -> None:
    """A file never verified (not a model) replaced by another: verify has no verified digest
    to hold it to, so it reads the new file as the scan does, never leaving it `changed` with
    a question to accept it (a GUI walk: Verify selected asked, Rescan did not)."""
    path = folder / "m.gguf"
    path.write_bytes(b"not a model at all" * 100)
    reg = registry(store, folder)
    await reg.scan()
    assert (await reg.get("m")).state == "invalid"
    path.unlink()
    path.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    checked = await reg.verify("m")
    assert (checked.state, checked.digest) == ("invalid", sha256(path))
    assert "observed_digest" not in checked.meta and "magic" not in checked.meta["error"]
    path.unlink()
    write_gguf(path, context_length=4096)
    checked = await reg.verify("m")
    assert (checked.state, checked.digest, checked.context_length) == (
        "verified",
        sha256(path),
        4096,
    )
    assert await reg.path_for_run("m") == path


async def test_path_for_run_stats_the_file_again(store: Store, folder: Path) -> None:
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()
    with path.open("ab") as f:
        f.write(b"appended after the scan")
    assert (await refused(reg, "m")).code == "model_changed"
    assert (await reg.get("m")).state == "changed"


async def test_deleted_file_is_missing_and_comes_back(store: Store, folder: Path) -> None:
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()
    kept = path.read_bytes()
    st = path.stat()
    path.unlink()
    await reg.scan()
    info = await reg.get("m")
    assert info.state == "missing"
    assert info.as_api()["state"] == "missing"
    error = await refused(reg, "m")
    assert (error.status, error.code) == (409, "model_missing")
    with pytest.raises(LmspError) as caught:
        await reg.verify("m")
    assert caught.value.code == "model_missing"
    # Put back as it was: the next scan hashes it, finds the same digest, and runs it again.
    path.write_bytes(kept)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    await reg.scan()
    assert (await reg.get("m")).state == "verified"
    assert await reg.path_for_run("m") == path


async def test_deleted_file_noticed_at_run_time(store: Store, folder: Path) -> None:
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()
    path.unlink()
    assert (await refused(reg, "m")).code == "model_missing"
    assert (await reg.get("m")).state == "missing"


async def test_unknown_and_hostile_ids_open_nothing(
    store: Store, folder: Path, tmp_path: Path
) -> None:
    write_gguf(folder / "m.gguf")
    # A real model file next to the folder: any id joined into a path could reach it.
    write_gguf(tmp_path / "secret.gguf")
    (tmp_path / "x").write_bytes(b"secret")
    reg = registry(store, folder)
    await reg.scan()
    opened: list[str] = []
    watching = True

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if watching and event in {"open", "os.scandir", "os.listdir"} and args:
            opened.append(str(args[0]))

    sys.addaudithook(audit)  # hooks cannot be removed; `watching` switches it off
    try:
        for model_id in [*HOSTILE_IDS, "secret", "nope", str(tmp_path / "secret.gguf")]:
            for call in (reg.get, reg.path_for_run, reg.verify):
                with pytest.raises(LmspError) as caught:
                    await call(model_id)
                assert (caught.value.status, caught.value.code) == (404, "model_not_found")
    finally:
        watching = False
    assert [p for p in opened if str(tmp_path) in p and not p.startswith(str(store.db.path))] == []


async def test_progress_events_for_the_gui(store: Store, folder: Path) -> None:
    a = write_gguf(folder / "a.gguf", vocab=3000)
    b = write_gguf(folder / "b.gguf", vocab=3000, payload=b"b")
    reg = registry(store, folder, chunk_size=1024)
    events: list[ModelEvent] = []
    reg.listeners.append(events.append)
    await reg.scan()
    for path in (a, b):
        model_id = path.stem
        progress = [e for e in events if e.kind == "progress" and e.model_id == model_id]
        done = [e.bytes_done for e in progress]
        assert len(progress) > 2
        assert done == sorted(done)
        assert done[-1] == progress[-1].bytes_total == path.stat().st_size
        states = [e.state for e in events if e.kind == "state" and e.model_id == model_id]
        assert states == ["unverified", "hashing", "verified"]
    # Overall progress across the whole scan, not per piece.
    overall = [e for e in events if e.kind == "progress"]
    assert [e.total_done for e in overall] == sorted(e.total_done for e in overall)
    both = a.stat().st_size + b.stat().st_size
    assert {e.total_bytes for e in overall} == {both}
    assert overall[-1].total_done == both
    assert events[-1].kind == "scan_finished"


async def test_a_failing_listener_does_not_stop_the_scan(store: Store, folder: Path) -> None:
    write_gguf(folder / "m.gguf")
    reg = registry(store, folder)

    def broken(event: ModelEvent) -> None:
        raise RuntimeError("listener bug")

    reg.listeners.append(broken)
    await reg.scan()
    assert (await reg.get("m")).state == "verified"


async def test_unverified_model_is_not_run(store: Store, folder: Path) -> None:
    write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    reg.stop()  # shutting down: hashing is abandoned, the model stays unverified
    await reg.scan()
    info = await reg.get("m")
    assert info.state == "unverified" and info.digest is None
    assert info.as_api("loaded")["state"] == "unloaded"
    assert (await refused(reg, "m")).code == "model_unverified"
    restarted = registry(store, folder)
    await restarted.scan()
    assert (await restarted.get("m")).state == "verified"


async def test_same_name_in_two_folders_gets_two_ids(store: Store, base: Path) -> None:
    one, two = base / "one", base / "two"
    one.mkdir()
    two.mkdir()
    write_gguf(one / "Model.gguf")
    write_gguf(two / "model.gguf", payload=b"2")
    reg = registry(store, one, two)
    await reg.scan()
    models = {m.id: str(m.path) for m in await reg.list_models()}
    assert models == {
        "model": str(one / "Model.gguf"),
        "model-2": str(two / "model.gguf"),
    }


async def test_only_runnable_gguf_files_are_listed(store: Store, folder: Path) -> None:
    write_gguf(folder / "big-00001-of-00002.gguf")
    write_gguf(folder / "big-00002-of-00002.gguf", payload=b"2")
    write_gguf(folder / "mmproj-vision.gguf")
    (folder / "notes.txt").write_text("not a model")
    (folder / "dir.gguf").mkdir()
    (folder / "publisher").mkdir()
    write_gguf(folder / "publisher" / "nested.gguf")
    reg = registry(store, folder)
    await reg.scan()
    assert [m.id for m in await reg.list_models()] == ["big-00001-of-00002", "nested"]


async def test_a_gguf_that_is_not_one_is_listed_with_the_reason(store: Store, folder: Path) -> None:
    (folder / "broken.gguf").write_bytes(b"not a gguf at all" * 100)
    reg = registry(store, folder)
    await reg.scan()
    info = await reg.get("broken")
    assert info.architecture is None
    assert "magic" in info.meta["error"]


async def test_add_folder_scans_it(store: Store, folder: Path, tmp_path: Path) -> None:
    reg = registry(store)
    with pytest.raises(LmspError) as caught:
        await reg.add_folder(tmp_path / "nowhere")
    assert caught.value.code == "folder_not_found"
    write_gguf(folder / "m.gguf")
    await reg.add_folder(folder)
    assert reg.folders == [folder]
    assert (await reg.get("m")).state == "verified"


async def test_a_folder_not_looked_in_hides_its_models(store: Store, folder: Path) -> None:
    """A folder given for one run (`--models-dir`) or removed from Settings is not looked in
    by the next run, which cannot know its files: they are not listed (they were listed
    "missing" for good, though on disk: a GUI walk), and with the folder back they are listed
    verified again without being read again."""
    path = write_gguf(folder / "m.gguf")
    await registry(store, folder).scan()
    reg = registry(store)
    await reg.scan()
    assert [m.id for m in await reg.list_models()] == []
    assert (await refused(reg, "m")).code == "model_not_found"
    again = registry(store, folder)
    await again.scan()
    back = await again.get("m")
    assert (back.state, back.digest) == ("verified", sha256(path))
    assert again.bytes_hashed == 0


async def test_a_linked_file_is_listed_by_the_folder_it_was_found_in(
    store: Store, folder: Path, base: Path
) -> None:
    """A file linked into a model folder is recorded by its real path, elsewhere: the row
    keeps the folder the scan found it in, so the next run with that folder lists it, and one
    without it does not (test_settings_live's case; 2f752f5 read the folder from the path)."""
    elsewhere = base / "store" / "blobs"
    elsewhere.mkdir(parents=True)
    real = write_gguf(elsewhere / "m.gguf")
    (folder / "m.gguf").symlink_to(real)
    await registry(store, folder).scan()
    reg = registry(store, folder)
    await reg.scan()
    info = await reg.get("m")
    assert (info.path, info.state) == (real, "verified")
    (folder / "m.gguf").unlink()  # the link removed, the file it led to still there: gone
    await reg.scan()
    assert (await reg.get("m")).state == "missing"
    assert [m.id for m in await registry(store, elsewhere.parent).list_models()] == []


async def test_a_row_recorded_without_its_folder_is_missing_as_before(
    store: Store, folder: Path
) -> None:
    """Rows recorded before the folder was kept with them name none: a run that does not find
    their file lists them missing, as before; found again, they get their folder."""
    write_gguf(folder / "m.gguf")
    await registry(store, folder).scan()
    await store.db.run(
        lambda conn: conn.execute("UPDATE models SET meta = json_remove(meta, '$.folder')").close()
    )
    reg = registry(store)
    await reg.scan()
    assert (await reg.get("m")).state == "missing"
    assert (await refused(reg, "m")).code == "model_missing"
    await registry(store, folder).scan()
    await registry(store).scan()
    assert [m.id for m in await registry(store).list_models()] == []


async def test_background_scan_lists_first_and_hashes_after(store: Store, folder: Path) -> None:
    path = write_gguf(folder / "m.gguf", vocab=5000)
    reg = registry(store, folder, chunk_size=1024)
    finished = asyncio.Event()
    reg.listeners.append(lambda e: finished.set() if e.kind == "scan_finished" else None)
    await reg.scan(wait=False)
    listed = await reg.get("m")  # known before its digest is known
    assert listed.state in {"unverified", "hashing"}
    # A run waits for the hashing the scan queued instead of failing model_unverified.
    run = asyncio.create_task(reg.path_for_run("m"))
    assert await asyncio.wait_for(run, timeout=30) == path
    assert (await reg.get("m")).digest == sha256(path)
    await asyncio.wait_for(finished.wait(), timeout=30)
    await reg.close()


async def test_verified_model_stays_runnable_while_verified_again(
    store: Store, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()
    release = threading.Event()

    def held_sha256_file(*args: Any, **kwargs: Any) -> str:
        release.wait(timeout=30)  # hold the hashing thread until the test has looked
        return real_sha256_file(*args, **kwargs)

    monkeypatch.setattr(hashing, "sha256_file", held_sha256_file)
    verifying = asyncio.create_task(reg.verify("m"))
    try:
        for _ in range(3000):
            if (await reg.get("m")).hashing:
                break
            await asyncio.sleep(0.01)
        info = await reg.get("m")
        assert info.hashing and info.state == "verified"
        assert await reg.path_for_run("m") == path
    finally:
        release.set()
        await asyncio.wait([verifying])  # never leave it hashing past the store's closing
    assert verifying.result().state == "verified"


async def test_demo_model_keeps_its_id_when_its_package_moves(
    store: Store, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_venv, new_venv = base / "old-venv", base / "new-venv"
    old_venv.mkdir()
    new_venv.mkdir()
    demo = write_gguf(old_venv / "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setattr(scanning, "demo_model_path", lambda: demo)
    reg = ModelRegistry(store.db, [])
    await reg.scan()
    assert [(m.id, m.state) for m in await reg.list_models()] == [
        ("smollm2-135m-instruct", "verified")
    ]
    moved = demo.rename(new_venv / demo.name)
    monkeypatch.setattr(scanning, "demo_model_path", lambda: moved)
    await reg.scan()
    [model] = await reg.list_models()
    assert (model.id, model.path, model.state) == ("smollm2-135m-instruct", moved, "verified")
    assert await reg.path_for_run("smollm2-135m-instruct") == moved


async def test_a_lookup_read_before_a_change_is_not_kept(
    store: Store, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lookups keep the rows they read (every create looks its model up, B1); a row read
    before a change committed must not be kept past it, or the model would be offered as it
    was (here: verified, after its file went missing)."""
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()
    read_once, release = asyncio.Event(), asyncio.Event()
    fetchone = store.db.fetchone

    async def slow_fetchone(sql: str, params: Any = ()) -> Any:
        row = await fetchone(sql, params)
        read_once.set()
        await release.wait()  # the row is read; the change commits before it is returned
        return row

    monkeypatch.setattr(store.db, "fetchone", slow_fetchone)
    lookup = asyncio.create_task(reg.get("m"))
    await read_once.wait()
    monkeypatch.setattr(store.db, "fetchone", fetchone)
    path.unlink()
    assert (await refused(reg, "m")).code == "model_missing"
    release.set()
    assert (await lookup).state == "verified"  # read before the change: as it was then
    assert (await reg.get("m")).state == "missing"


async def test_a_kept_lookup_follows_each_change_and_is_the_callers_own(
    store: Store, folder: Path
) -> None:
    """Each create gets its model's info from memory (B1), rebuilt after any write to the
    models table; a caller changing its copy (as path_for_run sets a state) changes nothing
    for the next one."""
    path = write_gguf(folder / "m.gguf")
    reg = registry(store, folder)
    await reg.scan()
    assert (await reg.get("m")).state == "verified"
    kept = await reg.get("m")  # from memory now
    kept.state = "invalid"
    assert (await reg.get("m")).state == "verified"
    touch_later(path)
    assert (await refused(reg, "m")).code == "model_changed"  # written: changed
    assert (await reg.get("m")).state == "changed"
    assert (await reg.verify("m")).state == "verified"
    assert (await reg.get("m")).state == "verified"


async def test_a_hash_result_waits_for_a_database_another_program_holds(
    store: Store, folder: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The hash's write met the database locked by another program past the busy timeout
    (DatabaseLockedError, as db.run raises it): it is written once the lock is gone, not lost
    with the file left unverified and every run of it refused."""
    from lmsp_desktop.core.errors import DatabaseLockedError

    path = write_gguf(folder / "tiny.gguf")
    reg = registry(store, folder)
    monkeypatch.setattr(hashing, "LOCKED_RETRY_S", 0.01)
    write = reg._write
    locked = [2]  # the next two writes after the hash meet the lock

    async def held(work: Any) -> Any:
        if reg.bytes_hashed and locked[0]:
            locked[0] -= 1
            raise DatabaseLockedError(str(store.db.path))
        return await write(work)

    monkeypatch.setattr(reg, "_write", held)
    await reg.scan()
    assert locked == [0]
    [model] = await reg.list_models()
    assert model.state == "verified" and model.digest == sha256(path)
    assert await reg.path_for_run(model.id) == path
    assert "waits for the database to be free" in caplog.text


async def test_a_lookup_whose_read_a_scan_overtakes_waits_for_the_scan(
    store: Store, folder: Path
) -> None:
    """A lookup read no row, and before it looked at the gate a scan began, recorded the
    model and ended: the lookup answered 404 for a model the scan had just listed (a request
    sent right as the service started, under load: test_delta_commits' stream saw it). A
    scan begun during the read, or recording when it began, is waited for and the row read
    again."""
    write_gguf(folder / "tiny.gguf")
    reg = registry(store, folder)
    original = reg._read_row
    raced: list[str] = []

    async def overtaken(model_id: str) -> Any:
        row = await original(model_id)  # not recorded yet
        if not raced:
            raced.append(model_id)
            await reg.scan(wait=False)  # begins, records it and ends meanwhile
        return row

    reg._read_row = overtaken  # type: ignore[method-assign]
    info = await reg.get("tiny")
    assert raced == ["tiny"] and info.id == "tiny"
    await reg.close()
