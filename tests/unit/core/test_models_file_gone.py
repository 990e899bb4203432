"""A model file deleted behind the service's back is `missing`, never "not a model": a read of
its header that finds no file (FileNotFoundError) records it missing through the registry,
whichever read notices first (a scan, a verify, the memory estimate). Real SQLite, real
registry and fitter, real GGUF files; the deletion lands at the moment of the read (another
program deleting it then), through the header reader those reads share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models import scan_rows
from lmsp_desktop.core.models.fitting import ModelFitter
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta
from lmsp_desktop.core.models.machine import HostMemory
from lmsp_desktop.core.models.memory import ModelSettings, one_context
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.store import Store
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_registry import touch_later

GIB = 1024**3


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path.resolve() / "models"
    path.mkdir()
    return path


def registry(store: Store, folder: Path) -> ModelRegistry:
    return ModelRegistry(store.db, [folder], include_demo=False, chunk_size=4096)


def deleted_when_read(monkeypatch: pytest.MonkeyPatch, victim: Path) -> None:
    """The scan's header read of `victim` finds it deleted (another program's rm just then)."""

    def read(path: Path) -> Any:
        if Path(path) == victim:
            victim.unlink(missing_ok=True)
        return read_gguf_meta(path)

    monkeypatch.setattr(scan_rows, "read_gguf_meta", read)


async def state(reg: ModelRegistry, model_id: str) -> tuple[str, Any]:
    [info] = [m for m in await reg.list_models() if m.id == model_id]
    return info.state, info.meta.get("error")


async def test_a_file_deleted_as_verify_reads_its_header_is_missing(
    store: Store, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Verify of a file never verified reads its header after hashing it (a new file): gone
    by then, it is missing. It read "✗ not a model" (cannot read the GGUF header: [Errno 2]
    No such file or directory) until a Rescan or another Verify."""
    path = folder / "broken.gguf"
    path.write_bytes(b"GGUF" + os.urandom(4096))  # not a model: hashed, never verified
    reg = registry(store, folder)
    await reg.scan()
    assert (await state(reg, "broken"))[0] == "invalid"
    path.unlink()
    write_gguf(path)  # a model in its place now, then deleted as its header is read
    touch_later(path)
    deleted_when_read(monkeypatch, path)
    with pytest.raises(LmspError) as caught:
        await reg.verify("broken")
    assert caught.value.code == "model_missing"
    gone, error = await state(reg, "broken")
    assert gone == "missing"
    assert "No such file" not in str(error)
    await reg.close()


async def test_a_file_deleted_as_the_scan_reads_it_is_not_listed_as_a_model(
    store: Store, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new file gone by the time the scan reads its header is not recorded at all (the next
    scan finds it if it comes back); one that replaced a file that was not a model is missing."""
    new = write_gguf(folder / "new.gguf")
    deleted_when_read(monkeypatch, new)
    reg = registry(store, folder)
    await reg.scan()
    assert [m.id for m in await reg.list_models()] == []
    monkeypatch.undo()

    broken = folder / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(4096))
    await reg.scan()
    assert (await state(reg, "broken"))[0] == "invalid"
    broken.unlink()
    write_gguf(broken)  # replaced: read afresh by the next scan, which finds it deleted
    deleted_when_read(monkeypatch, broken)
    await reg.scan()
    assert (await state(reg, "broken"))[0] == "missing"
    await reg.close()


async def test_the_estimate_that_finds_the_file_gone_records_it_missing(
    store: Store, folder: Path
) -> None:
    """The memory estimate (the Models page's, GET /v1/models', `models list`'s) reads the
    header, or checks a header read before is still its file's: a file gone is recorded
    missing there and then, not left "verified" (or "not a model") until a Rescan."""
    kept = write_gguf(folder / "kept.gguf")
    broken = folder / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(4096))
    reg = registry(store, folder)
    await reg.scan()
    fitter = ModelFitter(
        store.db,
        one_context,
        default_parallel=lambda: 1,
        context_cap=lambda: 4096,
        memory=lambda: HostMemory(64 * GIB, 60 * GIB, "test"),
        gpus=lambda: [],
        file_gone=reg.file_gone,
    )
    [info] = [m for m in await reg.list_models() if m.id == "kept"]
    assert await fitter.current(info) is not None  # its shape read and kept
    kept.unlink()
    broken.unlink()
    assert await fitter.current(info) is None
    assert (await state(reg, "kept"))[0] == "missing"
    # The create path's admission does not look (a stat per create); the load says it.
    [gone] = [m for m in await reg.list_models() if m.id == "broken"]
    with pytest.raises(FileNotFoundError):
        await fitter.plan(gone, ModelSettings())
    assert (await state(reg, "broken"))[0] == "missing"
    # Back: the estimate does not mark it (the next scan verifies it again).
    write_gguf(kept)
    await fitter.current(info)
    assert (await state(reg, "kept"))[0] == "missing"
    await reg.close()
