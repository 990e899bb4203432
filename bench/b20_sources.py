"""B20 startup with 50 models across the three stores (LM Studio, Ollama, the Hugging Face
cache), all unchanged since the last run: the time the stores add to the model scan of a
start (peer: the same scan with the stores switched off, same database) and the bytes hashed.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path

from bench.common import make_gguf
from bench.report import Row
from lmsp_desktop.core.models.registry import ModelRegistry
from lmsp_desktop.core.models.sources import SOURCES
from lmsp_desktop.core.storage.db import Database
from tests.support import model_stores as stores

STORE_VARS = ("HOME", "OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")


def build_home(home: Path, models: int, tensor_bytes: int) -> None:
    """`models` distinct small GGUF files spread over the three stores' layouts."""
    made = home.parent / "b20-files"
    made.mkdir(parents=True, exist_ok=True)
    for i in range(models):
        src = make_gguf(made / f"Model{i:02d}-Q4_K_M.gguf", f"model {i}", tensor_bytes)
        if i % 3 == 0:
            stores.add_ollama_model(home, f"model{i:02d}", "7b", src)
        elif i % 3 == 1:
            stores.add_hf_file(home, src.name, src, repo=f"org{i:02d}/Model{i:02d}-GGUF")
        else:
            stores.add_lmstudio_file(home, f"pub{i:02d}", f"Model{i:02d}-GGUF", src.name, src)


async def measure(work: Path, models: int, repeats: int) -> dict[str, float]:
    db = Database(work / "b20-db" / "lmsp.db")
    await db.open()
    try:
        first = ModelRegistry(db, [], include_demo=False, sources=SOURCES)
        await first.scan()
        listed = await first.list_models()
        states = sorted({m.state for m in listed})
        if len(listed) != models or states != ["verified"]:
            raise AssertionError(f"{len(listed)} of {models} models listed, states {states}")
        with_stores, without, hashed = [], [], 0
        for _ in range(repeats):  # alternate, so load changes hit both alike
            for sources, times in ((SOURCES, with_stores), ((), without)):
                again = ModelRegistry(db, [], include_demo=False, sources=sources)  # a restart
                start = time.perf_counter()
                await again.scan()
                times.append(time.perf_counter() - start)
                hashed += again.bytes_hashed
        return {
            "with": statistics.median(with_stores),
            "without": statistics.median(without),
            "hashed": hashed,
            "first": first.bytes_hashed,
        }
    finally:
        await db.close()


def run(work: Path, quick: bool) -> list[Row]:
    models, repeats = (6, 3) if quick else (50, 7)
    home = work / "b20-home"
    build_home(home, models, tensor_bytes=64 * 1024)
    saved = {name: os.environ.get(name) for name in STORE_VARS}
    try:
        for name in STORE_VARS:
            os.environ.pop(name, None)
        os.environ["HOME"] = str(home)
        got = asyncio.run(measure(work, models, repeats))
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    added = got["with"] - got["without"]
    load = os.getloadavg()[0]
    return [
        Row(
            "B20",
            f"start-up model scan, {models} unchanged models in LM Studio, Ollama and HF cache",
            got["with"] * 1000,
            "ms",
            "≤ 200 ms added",
            got["with"] / got["without"] if got["without"] > 0 else None,
            "the same scan, stores off",
            added <= 0.2,
            note=f"added {added * 1000:.1f} ms (stores off: {got['without'] * 1000:.1f} ms); "
            f"median of {repeats}; load {load:.1f}",
        ),
        Row(
            "B20",
            f"bytes hashed at {repeats * 2} restarts with {models} unchanged models in the stores",
            got["hashed"],
            "bytes",
            "0 bytes",
            None,
            "",
            got["hashed"] == 0,
            note=f"the first scan hashed {got['first']:,.0f} bytes",
        ),
    ]
