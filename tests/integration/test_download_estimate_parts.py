"""The Download dialog's memory estimate of a hub model (core/downloads/estimate.py) read
from a real HTTP server speaking the hub's protocol: a split model's estimate counts the
layers of every part, as the same model unsplit (part 1's header lists only part 1's
tensors), and a header longer than the first Range read is read whole."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lmsp_desktop.core.downloads import estimate
from lmsp_desktop.core.downloads.estimate import remote_shape
from lmsp_desktop.core.downloads.hub import gguf_choices, list_files
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta
from lmsp_desktop.core.models.memory import ModelShape
from tests.support.cut_model import cut_demo_model
from tests.support.fake_hub import FakeHub, HubRepo, demo_gguf
from tests.support.split_model import copy_split_cut_model

REPO = "lmsp-test/Cut-GGUF"


@pytest.fixture
async def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeHub]:
    folder = tmp_path / "files"
    folder.mkdir()
    shutil.copyfile(cut_demo_model(), folder / "cut-Q4_1.gguf")
    parts = copy_split_cut_model(folder / "cut-Q2_K.gguf")
    files: dict[str, bytes | Path] = {"cut-Q4_1.gguf": folder / "cut-Q4_1.gguf"}
    files.update({f"split/{p.name}": p for p in parts})
    files["demo-Q4_1.gguf"] = demo_gguf()
    hub = FakeHub([HubRepo(REPO, files)])
    await hub.start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    try:
        yield hub
    finally:
        await hub.stop()


async def shapes(hub: FakeHub) -> dict[str, ModelShape]:
    """Each model of the repo by its first file's name: its estimate's shape."""
    _commit, files = await asyncio.to_thread(list_files, REPO, "main", None)
    return {
        choice.name: await asyncio.to_thread(remote_shape, REPO, choice, None)
        for choice in gguf_choices(files)
    }


async def test_a_split_models_estimate_counts_every_parts_layers(server: FakeHub) -> None:
    found = await shapes(server)
    whole = found["cut-Q4_1.gguf"]
    split = found["split/cut-Q2_K-00001-of-00003.gguf"]
    # Part 1's header alone holds only the first layers (why the estimate read every part).
    repo = server.repos[REPO]
    first = read_gguf_meta(Path(str(repo.files["split/cut-Q2_K-00001-of-00003.gguf"])))
    assert len(first.layer_bytes) < whole.layers
    assert split.layers == whole.layers > 1
    assert all(size > 0 for size in whole.layer_bytes)
    assert split.layer_bytes == whole.layer_bytes  # every layer, each as the unsplit model's
    # The weights as a whole: the three parts' sizes, not part 1's.
    assert split.file_bytes == sum(
        repo.size(name) for name in repo.files if name.startswith("split/")
    )
    assert sum(split.layer_bytes) == sum(whole.layer_bytes)
    # One header read (a Range request) per part, each from its own file.
    gets = [path for method, path, r in server.requests if method == "GET" and r]
    assert sorted(path.rsplit("/", 1)[1] for path in gets if "cut-Q2_K" in path) == [
        f"cut-Q2_K-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]


async def test_a_header_longer_than_the_first_read_is_read_whole(
    server: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo model's header (its 49,152-token vocabulary) is ~2 MB: a first read of 64 KiB
    # stops inside it, and a second, larger one reads it whole.
    monkeypatch.setattr(estimate, "HEADER_STEPS", (64 << 10, 32 << 20))
    shape = (await shapes(server))["demo-Q4_1.gguf"]
    local = read_gguf_meta(demo_gguf())
    assert shape.layer_bytes == tuple(local.layer_bytes[i] for i in range(shape.layers))
    assert shape.vocab == local.vocab_size == 49152
    ranges = [r for method, path, r in server.requests if method == "GET" and "demo-" in path]
    assert ranges == ["bytes=0-65535", "bytes=0-33554431"]
