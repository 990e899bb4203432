"""A split GGUF model (`NAME-00001-of-00003.gguf` and its other parts) is checked whole: each
part's size against its header, each part hashed, each part's presence at a run. Part 1 alone
was: a cut part 2 read "verified" (llama.cpp then failed naming part 1), a corrupted part 3
verified, a deleted part 2 read "no longer at <part 1>" (which was there), and the parameters
counted part 1's tensors only. Real SQLite, the real registry, parts written as llama.cpp's
gguf-split writes them (tests/support/gguf_split)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lmsp_desktop.cli_model_check import why_not_run
from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.store import Store
from tests.support.cut_model import cut_demo_model
from tests.support.split_model import copy_split_cut_model

MODEL = "smolsplit-00001-of-00003"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path.resolve() / "models"
    path.mkdir()
    return path


@pytest.fixture
def parts(folder: Path) -> list[Path]:
    return copy_split_cut_model(folder / "smolsplit.gguf")


def registry(store: Store, folder: Path) -> ModelRegistry:
    return ModelRegistry(store.db, [folder], include_demo=False)


def keep_mtime(path: Path, change: bytes, offset: int) -> None:
    """Write `change` at `offset` in place, leaving the file's size and mtime as they were:
    only its hash can tell."""
    st = path.stat()
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(change)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


async def refused(reg: ModelRegistry) -> LmspError:
    with pytest.raises(LmspError) as caught:
        await reg.path_for_run(MODEL)
    return caught.value


async def test_a_split_model_counts_every_part(
    store: Store, folder: Path, parts: list[Path]
) -> None:
    reg = registry(store, folder)
    await reg.scan()
    [model] = await reg.list_models()
    assert model.id == MODEL and model.state == "verified"
    whole = read_gguf_meta(cut_demo_model())
    assert model.parameters == whole.parameters  # it was part 1's tensors alone
    assert model.as_api("unloaded")["parameters"] == whole.parameters
    assert model.size_bytes == sum(p.stat().st_size for p in parts)
    assert await reg.path_for_run(MODEL) == parts[0]
    await reg.close()


async def test_a_cut_part_is_no_model_and_says_which_part(
    store: Store, folder: Path, parts: list[Path]
) -> None:
    size = parts[1].stat().st_size
    os.truncate(parts[1], size // 2)  # an unfinished download of part 2
    reg = registry(store, folder)
    await reg.scan()
    [model] = await reg.list_models()
    assert model.state == "invalid"
    reason = model.as_api("unloaded")["reason"]
    assert "part 2 of 3" in reason and parts[1].name in reason, reason
    assert f"has {size // 2:,}" in reason, reason  # its exact byte count, as a whole file's
    error = await refused(reg)
    assert error.code == "model_invalid" and parts[1].name in error.message
    await reg.close()


async def test_a_part_cut_after_it_was_verified_is_changed_then_named(
    store: Store, folder: Path, parts: list[Path]
) -> None:
    reg = registry(store, folder)
    await reg.scan()
    os.truncate(parts[1], parts[1].stat().st_size // 2)
    assert (await refused(reg)).code == "model_changed"  # a run checks every part
    info = await reg.verify(MODEL)
    assert info.state == "changed"
    assert parts[1].name in info.meta["observed_error"]
    await reg.close()


async def test_a_scan_sees_a_part_cut_after_it_was_verified(
    store: Store, folder: Path, parts: list[Path]
) -> None:
    reg = registry(store, folder)
    await reg.scan()
    os.truncate(parts[2], parts[2].stat().st_size - 1024)
    await reg.scan()
    assert (await reg.get(MODEL)).state == "changed"  # it stayed "verified"
    await reg.close()


async def test_a_corrupted_part_is_not_verified(
    store: Store, folder: Path, parts: list[Path]
) -> None:
    reg = registry(store, folder)
    await reg.scan()
    first = (await reg.get(MODEL)).digest
    keep_mtime(parts[2], b"\xde\xad\xbe\xef", parts[2].stat().st_size - 4096)
    await reg.scan()
    assert (await reg.get(MODEL)).state == "verified"  # size and mtime alike: unseen by a scan
    info = await reg.verify(MODEL)
    assert info.state == "changed"  # it printed "verified": part 1 alone was hashed
    assert info.digest == first  # the model's digest is its first part's, recorded
    await reg.close()


async def test_a_deleted_part_makes_it_missing_naming_that_part(
    store: Store, folder: Path, parts: list[Path]
) -> None:
    reg = registry(store, folder)
    await reg.scan()
    moved = parts[1].rename(folder.parent / parts[1].name)
    error = await refused(reg)
    assert error.code == "model_missing"
    assert parts[1].name in error.message and "no longer at" not in error.message
    await reg.scan()
    [model] = [m for m in await reg.list_models() if m.id == MODEL]
    assert model.state == "missing"
    reason = model.as_api("unloaded")["reason"]
    assert parts[1].name in reason, reason
    assert why_not_run(MODEL, "missing", reason) == reason  # models list: not "its file is gone"
    with pytest.raises(LmspError) as caught:
        await reg.verify(MODEL)  # it printed "verified", exit 0, the model still missing
    assert caught.value.code == "model_missing" and parts[1].name in caught.value.message
    assert (await reg.get(MODEL)).state == "missing"
    [problem] = reg.problems
    assert problem.message.startswith("the split model"), problem.message  # not a file name
    moved.rename(parts[1])  # put back as it was
    await reg.scan()
    assert (await reg.get(MODEL)).state == "verified"
    await reg.close()
