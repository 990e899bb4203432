"""A model refused as changed or missing can be made runnable again without the window: the
409s name the headless way, a file a pull wrote again is read as a new file (not refused as
changed), and an upstream's model is not "verified" as if it were a file here. A real SQLite
file and small GGUF files written by GGUFWriter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lmsp_desktop.core.errors import LmspError
from lmsp_desktop.core.models.info import VERIFIED, ModelInfo
from lmsp_desktop.core.storage.store import Store
from tests.unit.core.test_models_gguf_meta import write_gguf
from tests.unit.core.test_models_registry import folder, refused, registry, touch_later

__all__ = ["folder"]  # the fixture, shared with test_models_registry


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path.resolve()


async def test_the_409s_name_the_command_that_verifies_or_rescans(
    store: Store, folder: Path
) -> None:
    """A headless user read "Verify it again (Models page, Verify selected) or rescan" with
    no window, no route and no command to do either; a rescan does not even clear `changed`."""
    path = write_gguf(folder / "good.gguf")
    gone = write_gguf(folder / "gone.gguf", payload=b"gone")
    reg = registry(store, folder)
    await reg.scan()
    touch_later(path)
    changed = await refused(reg, "good")
    assert changed.code == "model_changed"
    assert "`lmsp-desktop models verify good`" in changed.message
    assert "Verify selected" in changed.message
    assert "`lmsp-desktop models verify good --accept-new`" in changed.message
    assert "rescan" not in changed.message  # a rescan leaves a changed file changed
    gone.unlink()
    missing = await refused(reg, "gone")
    assert missing.code == "model_missing"
    assert "`lmsp-desktop models rescan`" in missing.message
    assert "Rescan" in missing.message  # the window's button


async def test_a_file_a_pull_wrote_again_is_verified_afresh_not_left_changed(
    store: Store, folder: Path
) -> None:
    """Case B: a pulled model deleted and pulled again lands at the same path as a new file.
    The pull names the files it wrote (checked against the hub's digest); they are read again
    as new files, so the model runs, instead of staying `changed` for good."""
    path = write_gguf(folder / "m.gguf")
    there = write_gguf(folder / "o.gguf", payload=b"o")
    reg = registry(store, folder)
    await reg.scan()
    kept = path.read_bytes()
    path.unlink()
    path.write_bytes(kept)  # a new file: another inode and modification time
    touch_later(path)
    before = reg.bytes_hashed
    # `there` was pulled again too, but its blob was already there: nothing to read.
    await reg.downloaded([path, there])
    await reg.scan()
    assert (await reg.get("m")).state == VERIFIED
    assert await reg.path_for_run("m") == path
    assert (await reg.get("o")).state == VERIFIED
    assert reg.bytes_hashed - before == path.stat().st_size
    # Without a pull's word the same replacement is a change, refused until verified.
    touch_later(path)
    await reg.scan()
    assert (await reg.get("m")).state == "changed"
    assert (await refused(reg, "m")).code == "model_changed"


async def test_a_pulled_file_needs_no_service_to_be_taken_as_new(
    store: Store, folder: Path
) -> None:
    """`models pull` without a service: the rows of the files it wrote are reset to new
    (unverified) ones, and the service's next start hashes them instead of finding them
    changed."""
    path = write_gguf(folder / "m.gguf")
    await registry(store, folder).scan()
    touch_later(path)
    await registry(store).downloaded([path])  # the CLI's registry: no folders, no scan
    reg = registry(store, folder)  # the next start
    await reg.scan()
    assert (await reg.get("m")).state == VERIFIED


class _OneUpstream:
    """A catalog with one upstream, `gpu`, whose model `llama` is reachable."""

    def owns(self, model_id: object) -> bool:
        return isinstance(model_id, str) and model_id.startswith("gpu/")

    def info(self, model_id: str) -> Any:
        from lmsp_desktop.core.upstreams.catalog import UpstreamModelInfo

        return UpstreamModelInfo(
            id=model_id,
            path=Path("gpu") / "upstream",
            size_bytes=0,
            mtime_ns=0,
            digest=None,
            state=VERIFIED,
            verified_at=None,
            architecture=None,
            parameters=None,
            quantization=None,
            context_length=None,
            created_at=0,
            upstream="gpu",
        )

    def infos(self) -> list[ModelInfo]:
        return []


async def test_an_upstreams_model_is_not_verified_as_a_file(store: Store, folder: Path) -> None:
    reg = registry(store, folder)
    reg.upstreams = _OneUpstream()
    with pytest.raises(LmspError) as caught:
        await reg.verify("gpu/llama")
    assert (caught.value.status, caught.value.code) == (400, "model_not_local")
    assert "gpu" in caught.value.message
