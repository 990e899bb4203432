"""A split model's memory estimate (the fit check before a load, GET /v1/models, the Models
page's memory column: all the fitter's plan) counts the weights of every part, as the same
model unsplit: each part's header lists only its own tensors, and part 1's alone left the
later layers' weights out of what goes on the GPU (too little there, too much in RAM, and
more layers fitted to the GPU than it holds)."""

from __future__ import annotations

import shutil
from pathlib import Path

from lmsp_desktop.core.engines.base import ALL_LAYERS
from lmsp_desktop.core.models.fitting import ModelFitter
from lmsp_desktop.core.models.gguf_meta import read_gguf_meta
from lmsp_desktop.core.models.machine import GpuDevice, HostMemory
from lmsp_desktop.core.models.memory import GPU_RESERVE, ModelSettings, Plan, one_context
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.storage.store import Store
from tests.support.cut_model import cut_demo_model
from tests.support.split_model import copy_split_cut_model

GIB = 1024**3


def fitter(store: Store, gpu_free: int | None) -> ModelFitter:
    """The fitter of a machine with 64 GiB of RAM and one GPU with `gpu_free` bytes free
    (None: no GPU)."""
    gpus = [] if gpu_free is None else [GpuDevice("test GPU", gpu_free, 24 * GIB)]
    return ModelFitter(
        store.db,
        one_context,
        default_parallel=lambda: 1,
        context_cap=lambda: 4096,
        memory=lambda: HostMemory(64 * GIB, 60 * GIB, "test"),
        gpus=lambda: gpus,
    )


def near(a: int, b: int, share: float = 0.02) -> bool:
    return abs(a - b) <= share * max(a, b)


async def test_a_split_models_estimate_is_the_whole_models(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copyfile(cut_demo_model(), folder / "whole.gguf")
    parts = copy_split_cut_model(folder / "split.gguf")
    assert len(parts) == 3
    # Split as gguf-split does: each part lists its own tensors, part 1 the first layers.
    first = read_gguf_meta(parts[0])
    assert first.values["split.count"] == 3
    assert len(first.layer_bytes) < len(read_gguf_meta(folder / "whole.gguf").layer_bytes)
    registry = ModelRegistry(store.db, [folder], include_demo=False, chunk_size=1 << 20)
    await registry.scan()
    models = {m.id: m for m in await registry.list_models()}
    whole, split = models["whole"], models["split-00001-of-00003"]
    assert split.path == parts[0]

    async def plans(gpu_free: int | None, settings: ModelSettings) -> tuple[Plan, Plan]:
        fit = fitter(store, gpu_free)
        return await fit.plan(whole, settings), await fit.plan(split, settings)

    # No GPU: every byte of the weights is in RAM.
    a, b = await plans(None, ModelSettings(context_length=4096))
    assert near(a.estimate.total, b.estimate.total), (a.estimate, b.estimate)

    # Every layer on the GPU: the weights there and in RAM as the whole model's.
    everything = ModelSettings(context_length=4096, gpu_layers=ALL_LAYERS)
    a, b = await plans(8 * GIB, everything)
    assert near(a.estimate.gpu, b.estimate.gpu), (a.estimate, b.estimate)
    assert near(a.estimate.weights, b.estimate.weights), (a.estimate, b.estimate)
    assert near(a.estimate.total, b.estimate.total), (a.estimate, b.estimate)

    # GPU layers auto, on a GPU a little short of the whole model's layers: as many layers
    # fitted to it for both (part 1's weights alone made every layer of the split fit).
    short = a.estimate.gpu - 1 + GPU_RESERVE
    a, b = await plans(short, ModelSettings(context_length=4096))
    assert 0 <= a.settings.gpu_layers < len(read_gguf_meta(whole.path).layer_bytes)
    assert b.settings.gpu_layers == a.settings.gpu_layers, (a.settings, b.settings)
    assert near(a.estimate.gpu, b.estimate.gpu), (a.estimate, b.estimate)
